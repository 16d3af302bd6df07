//! `--set FIELD=VALUE`: the vrampool policy's [`Config`] with some fields
//! changed from the default, so a knob can be tried on a trace without
//! writing Rust. A field is a path into the configuration as serde writes it
//! (`headroom`, `without_limit.medium_segment_fraction`); a value is JSON
//! (`0.1`, `null`, `true`, `{"Preallocate":1073741824}` for `growth`), or a
//! bare word taken as a string (`release_order=LeastRecentlyUsed`). The limit
//! and its kind are the command's own (`--budget`, `--ceiling`,
//! `--min-budget`), not settings.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use vrampool::Config;

/// Fields the commands set themselves, and what to use instead.
const COMMANDS_OWN: [(&str, &str); 2] = [
    (
        "limit",
        "the limit is the command's: replay --budget, or corpus --min-budget",
    ),
    (
        "limit_kind",
        "the limit's kind is the command's: replay --ceiling",
    ),
];

/// `base` with every `FIELD=VALUE` of `sets` applied in order, each checked
/// as it is applied, then validated.
/// A refused `--set` is a usage error ([`crate::Usage`]).
pub fn configured(base: Config, sets: &[String]) -> Result<Config> {
    let mut config = base;
    for set in sets {
        config = apply(&config, set).map_err(|e| crate::Usage(format!("{e:#}")))?;
    }
    if let Err(why) = config.validate() {
        usage!("--set {}: {why}", sets.join(" --set "));
    }
    Ok(config)
}

/// `config` with one `FIELD=VALUE` applied.
fn apply(config: &Config, set: &str) -> Result<Config> {
    let (path, raw) = set
        .split_once('=')
        .with_context(|| format!("--set {set}: expected FIELD=VALUE, e.g. headroom=0.1"))?;
    if let Some((_, instead)) = COMMANDS_OWN.iter().find(|(f, _)| *f == path) {
        bail!("--set {set}: {instead}");
    }
    let value: Value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    let mut tree = serde_json::to_value(config).context("serializing the configuration")?;
    let mut node = &mut tree;
    let mut walked = Vec::new();
    for key in path.split('.') {
        let fields = match node {
            Value::Object(map) => map,
            _ => bail!(
                "--set {set}: `{}` is a value, not a group of fields",
                walked.join(".")
            ),
        };
        if !fields.contains_key(key) {
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            let at = if walked.is_empty() {
                "the configuration".to_string()
            } else {
                format!("`{}`", walked.join("."))
            };
            bail!(
                "--set {set}: {at} has no field `{key}`; its fields are {}",
                known.join(", ")
            );
        }
        walked.push(key);
        node = fields.get_mut(key).expect("checked above");
    }
    *node = value;
    serde_json::from_value(tree).map_err(|e| {
        anyhow::anyhow!(
            "--set {set}: {e} (a value is JSON: a number, true / false, null, a \"string\" or a \
             bare word, or {{\"Variant\": value}} as growth={{\"Preallocate\":1073741824}})"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(sets: &[&str]) -> Result<Config> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        configured(Config::default(), &sets)
    }

    #[test]
    fn fields_change_and_the_rest_stay_default() {
        let c = set(&[
            "headroom=0.1",
            "without_limit.medium_segment_fraction=0.015625",
            "release_order=LeastRecentlyUsed",
        ])
        .unwrap();
        assert_eq!(c.headroom, Some(0.1));
        assert_eq!(c.without_limit.medium_segment_fraction, 0.015625);
        assert_eq!(c.release_order, vrampool::ReleaseOrder::LeastRecentlyUsed);
        assert_eq!(c.under_limit, Config::default().under_limit);
        assert_eq!(set(&["headroom=null"]).unwrap().headroom, None);
        let c = set(&[r#"growth={"Preallocate":1048576}"#]).unwrap();
        assert_eq!(c.growth, vrampool::Growth::Preallocate(1 << 20));
        assert_eq!(set(&[]).unwrap(), Config::default());
    }

    #[test]
    fn a_wrong_field_or_value_says_what_is_wrong() {
        let e = set(&["headrom=0.1"]).unwrap_err().to_string();
        assert!(
            e.contains("no field `headrom`") && e.contains("headroom"),
            "{e}"
        );
        let e = set(&["without_limit.large=1"]).unwrap_err().to_string();
        assert!(e.contains("`without_limit` has no field `large`"), "{e}");
        let e = set(&["headroom.x=1"]).unwrap_err().to_string();
        assert!(e.contains("`headroom` is a value"), "{e}");
        let e = set(&["headroom=0.1", "headroom=lots"])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--set headroom=lots: invalid type"), "{e}");
        let e = set(&["growth=Preallocate"]).unwrap_err().to_string();
        assert!(e.contains(r#"growth={"Preallocate":1073741824}"#), "{e}");
        let e = set(&["limit=1000"]).unwrap_err().to_string();
        assert!(e.contains("replay --budget"), "{e}");
        let e = set(&["limit_kind=Ceiling"]).unwrap_err().to_string();
        assert!(e.contains("replay --ceiling"), "{e}");
        let e = set(&["churn_limit=-1"]).unwrap_err().to_string();
        assert!(
            e.contains("churn_limit must be finite and not negative"),
            "{e}"
        );
        let e = set(&["headroom"]).unwrap_err().to_string();
        assert!(e.contains("expected FIELD=VALUE"), "{e}");
    }
}
