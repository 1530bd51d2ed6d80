-- One payment deadline job per moment, not per order: the orders a
-- transaction confirms share their `pay_by` (the transaction's `now()`
-- plus the window), so the worker queues one job for them all, named by
-- the sale and that moment (worker/deadlines.rs), and the job cancels
-- them with one statement. Both indexes are looked up by that pair.
--
-- The unpaid ones: the deadline's cancellation, and the sweep, which
-- puts back one job per sale and moment still unpaid (in that order, a
-- page at a time). Replaces the index by id, whose only reader was the
-- sweep's walk by id.
DROP INDEX orders_unpaid;
CREATE INDEX orders_unpaid ON orders (sale_id, pay_by)
    WHERE status = 'confirmed' AND pay_by IS NOT NULL;

-- The cancelled ones: a deadline gives back the unit of every order of
-- its moment that is cancelled, its own cancellations and those of an
-- earlier delivery that died before Redis heard of them. Written only
-- when an order is cancelled, so the drain's inserts do not pay for it.
CREATE INDEX orders_cancelled ON orders (sale_id, pay_by) WHERE status = 'cancelled';
