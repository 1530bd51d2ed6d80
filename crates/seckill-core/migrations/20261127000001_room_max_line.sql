-- A waiting room's cap on its line (RoomSettings::max_line): NULL for no
-- cap, else within the range the API checks, and only beside a room.
ALTER TABLE sales
    ADD COLUMN room_max_line INTEGER CHECK (room_max_line BETWEEN 1 AND 10000000),
    ADD CONSTRAINT sales_room_line CHECK (room_max_line IS NULL OR room_mode IS NOT NULL);
