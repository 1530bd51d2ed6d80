use super::*;

#[test]
fn a_cluster_is_named_by_a_comma_separated_list_of_nodes() {
    let at = RedisAt::cluster(" redis://127.0.0.1:7000, redis://127.0.0.1:7001 ,").unwrap();
    assert_eq!(
        at.node_urls(),
        ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
    );
    assert_eq!(
        at.env(),
        [(
            CLUSTER_ENV,
            "redis://127.0.0.1:7000,redis://127.0.0.1:7001".to_owned()
        )]
    );
}

#[test]
fn sentinels_are_named_by_their_urls_and_the_primary_by_its_name() {
    let at = RedisAt::sentinel(
        "redis://127.0.0.1:26379, redis://127.0.0.1:26380",
        " mymaster ",
    )
    .unwrap();
    assert_eq!(
        at.env(),
        [
            (
                SENTINELS_ENV,
                "redis://127.0.0.1:26379,redis://127.0.0.1:26380".to_owned()
            ),
            (MASTER_NAME_ENV, "mymaster".to_owned()),
        ]
    );
    let nameless = RedisAt::sentinel("redis://127.0.0.1:26379", " ").unwrap_err();
    assert!(
        nameless.to_string().contains("SECKILL_REDIS_MASTER_NAME"),
        "{nameless}"
    );
    let bad = RedisAt::sentinel("http://x", "mymaster").unwrap_err();
    assert!(
        format!("{bad:#}").contains("\"http://x\" is not a Redis URL"),
        "{bad:#}"
    );
}

#[test]
fn an_empty_or_malformed_node_list_is_refused_with_its_reason() {
    let empty = RedisAt::cluster(" , ").unwrap_err().to_string();
    assert!(empty.contains("empty"), "{empty}");
    let bad = RedisAt::cluster("redis://127.0.0.1:7000,http://x").unwrap_err();
    assert!(
        format!("{bad:#}").contains("\"http://x\" is not a Redis URL"),
        "{bad:#}"
    );
}
