//! The names of the constraints the code relies on, next to the migration
//! that creates each one.
//!
//! When PostgreSQL refuses a statement, the error names the constraint it
//! broke; the worker matches on these names to tell "the sale is full" from
//! "this buyer already holds a unit" (see `orders.rs`). A test below reads
//! the migrations, so a constraint renamed there without a change here fails
//! the build's tests rather than silently turning a refusal into an error.

/// `CHECK (sold >= 0 AND sold <= stock_total)` on `sales`: one more unit
/// than the sale has is refused. The last line of defence against an
/// oversell. Created in `migrations/20261122000001_sales_and_orders.sql`.
pub(crate) const SOLD_WITHIN_STOCK: &str = "sold_within_stock";

/// The partial unique index on `orders (sale_id, user_id)` over confirmed
/// and paid orders: one live order per buyer per sale. Created in
/// `migrations/20261122000001_sales_and_orders.sql`, narrowed to confirmed
/// and paid orders in `migrations/20261123000001_payment_window.sql`.
pub(crate) const ONE_ORDER_PER_BUYER: &str = "orders_one_per_buyer";

/// The primary key of `orders`, the order id: a redelivered order job is
/// refused by it, never written twice. PostgreSQL's own name for
/// `id UUID PRIMARY KEY` in `migrations/20261122000001_sales_and_orders.sql`.
pub(crate) const ORDER_ID: &str = "orders_pkey";

/// Whether `error` is the violation of the named constraint or unique index.
pub(crate) fn violates(error: &sqlx::Error, constraint: &str) -> bool {
    error
        .as_database_error()
        .and_then(|db| db.constraint())
        .is_some_and(|name| name == constraint)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: &str = include_str!("../../migrations/20261122000001_sales_and_orders.sql");
    const PAYMENT: &str = include_str!("../../migrations/20261123000001_payment_window.sql");

    #[test]
    fn every_constraint_named_here_is_created_by_its_migration() {
        assert!(FIRST.contains(&format!("CONSTRAINT {SOLD_WITHIN_STOCK} CHECK")));
        assert!(FIRST.contains(&format!("CREATE UNIQUE INDEX {ONE_ORDER_PER_BUYER} ON")));
        assert!(PAYMENT.contains(&format!("CREATE UNIQUE INDEX {ONE_ORDER_PER_BUYER} ON")));
    }
}
