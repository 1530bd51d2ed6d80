//! Database URLs: pointing one at another database, and hiding passwords.

use anyhow::Context;

/// `url` with its database (the path) replaced by `database`.
pub fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let mut parsed = url::Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    parsed.set_path(database);
    Ok(parsed.to_string())
}

/// A URL with its password, if any, replaced by `***`, fit for logs.
pub fn redact(url: &str) -> String {
    match ::url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://u:p@host:5433/old?sslmode=disable", "new").unwrap(),
            "postgres://u:p@host:5433/new?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432", "seckill").unwrap(),
            "postgres://postgres@127.0.0.1:5432/seckill"
        );
    }
}
