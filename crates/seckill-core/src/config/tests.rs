use super::*;

/// `ALL` is written by hand beside the enum: read the enum's variants
/// from this file, so that a strategy added to one and not the other
/// fails here (the lab runs `ALL`, and the command line offers it).
#[test]
fn all_holds_every_variant_of_the_enum() {
    let source = include_str!("../config.rs");
    let body = source
        .split("pub enum Strategy {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("the enum Strategy in config.rs");
    let code: String = body
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    let mut variants: Vec<&str> = code
        .split(',')
        .map(str::trim)
        .filter(|variant| !variant.is_empty())
        .collect();
    variants.sort_unstable();
    let mut listed: Vec<String> = Strategy::ALL.iter().map(|s| format!("{s:?}")).collect();
    listed.sort_unstable();
    assert_eq!(variants, listed);
}

#[test]
fn every_strategy_is_found_by_its_name() {
    for strategy in Strategy::ALL {
        assert_eq!(Strategy::from_name(strategy.as_str()), Some(strategy));
    }
    assert_eq!(Strategy::from_name("none"), None);
}

#[test]
fn the_defaults_pass_their_own_checks_and_a_value_out_of_range_is_named() {
    PurchaseSettings::default()
        .check()
        .expect("defaults are in range");
    WorkerSettings::default()
        .check()
        .expect("defaults are in range");
    RateLimitSettings::default()
        .check()
        .expect("defaults are in range");
    let wrong = PurchaseSettings {
        lock_ttl_ms: 0,
        ..PurchaseSettings::default()
    };
    let refused = wrong.check().expect_err("a lock TTL of 0 is refused");
    assert!(refused.to_string().contains("lock_ttl_ms"), "{refused}");
}
