-- A sale's waiting room (domain/room.rs): off when room_mode is NULL.
-- The four settings come together or not at all, each within the range
-- the API checks (RoomSettings::check), so that a row written by hand
-- cannot hold a room the instances would refuse to read.
ALTER TABLE sales
    ADD COLUMN room_mode TEXT CHECK (room_mode IN ('fifo', 'lottery')),
    ADD COLUMN room_admit_per_sec INTEGER CHECK (room_admit_per_sec BETWEEN 1 AND 10000),
    ADD COLUMN room_max_active INTEGER CHECK (room_max_active BETWEEN 1 AND 1000000),
    ADD COLUMN room_admission_secs INTEGER CHECK (room_admission_secs BETWEEN 10 AND 3600),
    ADD CONSTRAINT sales_room_whole CHECK (
        (room_mode IS NULL) = (room_admit_per_sec IS NULL)
        AND (room_mode IS NULL) = (room_max_active IS NULL)
        AND (room_mode IS NULL) = (room_admission_secs IS NULL)
    );

-- The key the rooms' tickets and admissions are signed with: one per
-- database, drawn here, read by every instance, so that a pass one
-- instance signed is good on all of them. 32 bytes from two random UUIDs
-- (gen_random_uuid draws from the server's strong random source; 244 of
-- the 256 bits are random).
ALTER TABLE database_identity
    ADD COLUMN room_key BYTEA NOT NULL DEFAULT decode(
        replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex');
