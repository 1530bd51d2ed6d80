-- Sales and orders: PostgreSQL has the last word.
--
-- Redis decides quickly who gets a unit; this schema makes sure that, whatever
-- Redis or the application gets wrong, the database can never record more
-- confirmed orders than the sale has units, nor two live orders for one buyer.

CREATE TABLE sales (
    id          BIGSERIAL   PRIMARY KEY,
    name        TEXT        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    price_cents BIGINT      NOT NULL CHECK (price_cents >= 0),
    stock_total INTEGER     NOT NULL CHECK (stock_total > 0),
    -- Units held by confirmed orders. The worker bumps it in the same
    -- transaction that inserts the order, so it always equals the count of
    -- confirmed orders. The CHECK below is the last line of defence against
    -- an oversell: an UPDATE that would push it past stock_total fails.
    sold        INTEGER     NOT NULL DEFAULT 0,
    starts_at   TIMESTAMPTZ NOT NULL,
    ends_at     TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT sold_within_stock CHECK (sold >= 0 AND sold <= stock_total),
    CONSTRAINT ends_after_start CHECK (ends_at IS NULL OR ends_at > starts_at)
);

CREATE TABLE orders (
    -- The id the purchase API handed to the buyer (a UUIDv7) and the id of
    -- the queue job that carried it: a redelivered job hits this key and is
    -- a no-op.
    id         UUID        PRIMARY KEY,
    sale_id    BIGINT      NOT NULL REFERENCES sales (id),
    user_id    TEXT        NOT NULL CHECK (length(user_id) BETWEEN 1 AND 64),
    -- confirmed: holds a unit. rejected: PostgreSQL refused it (the sale was
    -- full, or the buyer already holds a unit); kept so that every order id
    -- the API ever accepted can be accounted for.
    status     TEXT        NOT NULL CHECK (status IN ('confirmed', 'rejected')),
    -- Why a rejected order was refused: 'sold_out' or 'duplicate_buyer'.
    reason     TEXT        CHECK ((status = 'rejected') = (reason IS NOT NULL)),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One live order per buyer per sale. Partial, so that the rejected orders we
-- keep for the record do not count.
CREATE UNIQUE INDEX orders_one_per_buyer ON orders (sale_id, user_id)
    WHERE status <> 'rejected';

CREATE INDEX orders_by_sale ON orders (sale_id, status);
