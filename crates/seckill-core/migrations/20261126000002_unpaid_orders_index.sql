-- The orders still waiting to be paid, by id: the sweep (worker/sweep.rs)
-- walks them a page at a time, in id order, every minute. Without this
-- index each page would scan past every paid and cancelled order before
-- it; with it, a sweep costs what the unpaid orders cost, however many
-- sales and orders came before.
CREATE INDEX orders_unpaid ON orders (id) WHERE status = 'confirmed' AND pay_by IS NOT NULL;
