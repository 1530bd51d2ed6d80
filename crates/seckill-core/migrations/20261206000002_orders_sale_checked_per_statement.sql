-- Every order names a sale that is there: the same promise as the foreign
-- key `orders.sale_id REFERENCES sales (id)`, checked once per statement
-- instead of once per row.
--
-- The foreign key looked up and locked the sale's row once for each order
-- inserted: a query of its own per row, about a third of what an insert
-- into `orders` cost PostgreSQL, in the worker's batches of thousands of
-- orders of one sale (docs/bench.md, "The worker's drain"). The trigger
-- below does the same lookup and lock once for each sale a statement
-- names, whatever its number of rows.
--
-- The foreign key's other half, a sale that orders name is never deleted
-- nor renumbered, is kept by the triggers on `sales` further down.
--
-- The race each side prevents, as the foreign key did with its row locks:
-- an insert locks the sales it names `FOR KEY SHARE` until it commits, and
-- a delete (or a change of `id`) needs the row's strongest lock, so it
-- waits for the insert's commit and then finds the new orders (each query
-- of a PL/pgSQL function reads a snapshot of its own). A delete that came
-- first holds its lock until it commits, and the insert's lock then finds
-- no row and refuses. Truncating `sales` takes the whole table, which the
-- insert's row lock waits for, or is waited for by.
--
-- Where triggers differ from the key: the table's owner can turn them
-- off (`ALTER TABLE orders DISABLE TRIGGER USER`), where only a
-- superuser turns a key's check off; and a statement trigger on a
-- partitioned `orders` would not run for rows written straight into one
-- of its partitions (docs/operations.md, "Past one Redis").
ALTER TABLE orders DROP CONSTRAINT orders_sale_id_fkey;

-- Every refusal below is what the foreign key's would have been: its
-- error code and its name, which a caller may match on.
CREATE FUNCTION orders_sale_refused(message text, on_table text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', message
        USING ERRCODE = 'foreign_key_violation',
              CONSTRAINT = 'orders_sale_id_fkey',
              TABLE = on_table;
END $$;

-- After each statement that inserts orders: lock each sale it names, and
-- refuse the statement if one is not there.
CREATE FUNCTION orders_name_sales() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
       FROM (SELECT DISTINCT sale_id FROM inserted) AS named
       LEFT JOIN LATERAL (
           SELECT id FROM sales WHERE sales.id = named.sale_id FOR KEY SHARE
       ) AS there ON true
      WHERE there.id IS NULL;
    IF FOUND THEN
        PERFORM orders_sale_refused('an order names a sale that is not there', 'orders');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER orders_name_sales AFTER INSERT ON orders
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION orders_name_sales();

-- An order's sale never changes (no code changes it; a trigger with the
-- rows of an UPDATE would be paid by every payment and cancellation).
CREATE FUNCTION orders_keep_their_sale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sale_id <> OLD.sale_id THEN
        PERFORM orders_sale_refused('an order''s sale cannot change', 'orders');
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER orders_keep_their_sale BEFORE UPDATE OF sale_id ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_keep_their_sale();

-- Only under READ COMMITTED is a sale deleted, renumbered or truncated:
-- there each query of the triggers below reads a snapshot of its own,
-- taken once the sale's row (or table) is locked, so it sees the orders
-- of every insert that held the sale and committed. A transaction of
-- REPEATABLE READ or SERIALIZABLE reads the snapshot of its start, which
-- misses an order committed since (the foreign key looked with a fresh
-- snapshot and failed the transaction; PL/pgSQL cannot), so it is
-- refused. No code of seckill deletes a sale; `seckill reset` truncates
-- under READ COMMITTED.
CREATE FUNCTION sales_removable_here() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM orders_sale_refused(
            'a sale is deleted, renumbered or truncated only under READ COMMITTED', 'sales');
    END IF;
END $$;

-- A sale that orders name is neither deleted nor renumbered. A BEFORE row
-- trigger runs once the row is locked, so an insert still holding the
-- sale `FOR KEY SHARE` has committed by then, and its orders are seen.
CREATE FUNCTION sales_keep_their_orders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.id <> OLD.id THEN
        PERFORM sales_removable_here();
        IF EXISTS (SELECT 1 FROM orders WHERE sale_id = OLD.id) THEN
            PERFORM orders_sale_refused(format('sale %s has orders', OLD.id), 'sales');
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER sales_keep_their_orders BEFORE DELETE OR UPDATE OF id ON sales
    FOR EACH ROW EXECUTE FUNCTION sales_keep_their_orders();

-- Truncating `sales` alone, with orders left, is refused; `TRUNCATE
-- orders, sales` (`seckill reset`) empties both, and this runs after both.
CREATE FUNCTION sales_truncated_with_orders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sales_removable_here();
    IF EXISTS (SELECT 1 FROM orders) THEN
        PERFORM orders_sale_refused('sales truncated while orders name them', 'sales');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER sales_truncated_with_orders AFTER TRUNCATE ON sales
    FOR EACH STATEMENT EXECUTE FUNCTION sales_truncated_with_orders();

-- Each function names `sales` and `orders` without a schema: pinned to
-- the schema they were made in, with the session's temporary tables
-- searched last, so that a temporary table named `sales` cannot stand in
-- for the real one (the foreign key named its table whole).
DO $$
DECLARE
    function_name text;
BEGIN
    FOREACH function_name IN ARRAY ARRAY[
        'orders_sale_refused(text, text)', 'orders_name_sales()',
        'orders_keep_their_sale()', 'sales_removable_here()',
        'sales_keep_their_orders()', 'sales_truncated_with_orders()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp',
                       function_name, current_schema());
    END LOOP;
END $$;
