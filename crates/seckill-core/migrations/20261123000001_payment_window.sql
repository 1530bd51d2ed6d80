-- The payment window: a confirmed order must be paid before its deadline,
-- or it is cancelled and its unit goes back on sale.
--
-- An order's life is now
--
--     (pending, in Redis) -> confirmed -> paid
--                                     \-> cancelled   (the deadline passed unpaid)
--                         -> rejected                 (PostgreSQL refused it)
--
-- Paying and cancelling race: the buyer presses Pay at the moment the
-- deadline job runs. Both are conditional UPDATEs on the order's status
-- (see src/payment.rs), so exactly one of them changes the row and the
-- other finds nothing to change.

-- The status column's CHECK (named by PostgreSQL after the column) gains
-- the two new states.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
    CHECK (status IN ('confirmed', 'paid', 'cancelled', 'rejected'));

ALTER TABLE orders
    -- The end of the payment window, on PostgreSQL's clock: set when the
    -- worker confirms the order. A payment is accepted only while
    -- now() < pay_by. Orders confirmed before this migration have none:
    -- they can no longer be paid (a comparison with NULL is never true),
    -- and no deadline job was ever queued for them, so they stay confirmed.
    ADD COLUMN pay_by       TIMESTAMPTZ,
    -- When the order was paid, or cancelled; set exactly when the status
    -- says so (the CHECKs below), so a row can never claim both.
    ADD COLUMN paid_at      TIMESTAMPTZ,
    ADD COLUMN cancelled_at TIMESTAMPTZ,
    ADD CONSTRAINT paid_at_iff_paid CHECK ((status = 'paid') = (paid_at IS NOT NULL)),
    ADD CONSTRAINT cancelled_at_iff_cancelled
        CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL));

-- One live order per buyer per sale, where "live" now means confirmed or
-- paid: a cancelled order no longer holds a unit, so its buyer may buy
-- again. (Before, the index excluded only rejected orders.)
DROP INDEX orders_one_per_buyer;
CREATE UNIQUE INDEX orders_one_per_buyer ON orders (sale_id, user_id)
    WHERE status IN ('confirmed', 'paid');

-- sales.sold now counts the units held by confirmed and paid orders: the
-- worker adds one when it confirms an order, and the cancellation of an
-- unpaid order takes it back in the same transaction (src/payment.rs).
COMMENT ON COLUMN sales.sold IS 'units held by confirmed and paid orders';
