-- Which database this is: one random id, drawn when the database is
-- migrated, written into the load epoch of every sale it loads into Redis
-- (`lua/sale_load.lua`).
--
-- The race this fences: two deployments share a Redis and a key prefix,
-- or a database is dropped and created again while Redis keeps its keys.
-- Both have a sale 1, and the keys `{sale:1}` already hold the other
-- database's stock, buyers and queue: the new sale would sell from them
-- (a sold-out sale of another database refuses every buyer), and its
-- worker would drain the other database's orders into this one. A load
-- that finds a sale's epoch naming another database clears the sale's
-- keys and loads it from here.
CREATE TABLE database_identity (
    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    -- One row, ever.
    one BOOLEAN NOT NULL DEFAULT TRUE UNIQUE CHECK (one)
);
INSERT INTO database_identity DEFAULT VALUES;
