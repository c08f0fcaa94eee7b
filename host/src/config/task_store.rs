//! `task_store`: where tasks' statuses and statistics are kept.
//!
//! ```yaml
//! task_store: sqlite                           # the default: contexts/tasks.db
//! task_store: {url_env: CTXHOST_DATABASE_URL}  # PostgreSQL, shared by workers on many hosts
//! ```
//! The PostgreSQL URL holds a password, so it is never written in the config: `url_env` names
//! the environment variable that holds it, read when the store is opened
//! ([`Config::store_spec`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Config, Invalid};
use crate::db::{DbError, PgUrl, StoreSpec};

/// `task_store`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TaskStoreConfig {
    /// `sqlite`: `contexts/tasks.db`.
    #[default]
    Sqlite,
    /// `{url_env: VAR}`: PostgreSQL at the URL held by environment variable `VAR`.
    Postgres {
        /// The environment variable holding the URL.
        url_env: String,
    },
}

/// The map form, `{url_env: VAR}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PostgresForm {
    url_env: String,
}

impl<'de> Deserialize<'de> for TaskStoreConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TaskStoreConfig, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Name(String),
            Map(PostgresForm),
        }
        match Form::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "task_store: expected `sqlite` or `{url_env: VARIABLE}` (the variable holding a PostgreSQL URL)",
            )
        })? {
            Form::Name(n) if n == "sqlite" => Ok(TaskStoreConfig::Sqlite),
            Form::Name(n) if n == "postgres" || n == "postgresql" => Err(serde::de::Error::custom(
                "task_store: PostgreSQL is given as `{url_env: VARIABLE}`, the environment variable holding its URL",
            )),
            Form::Name(n) => Err(serde::de::Error::custom(format!(
                "task_store: unknown task store `{n}` (expected `sqlite` or `{{url_env: VARIABLE}}`)"
            ))),
            Form::Map(m) => Ok(TaskStoreConfig::Postgres { url_env: m.url_env }),
        }
    }
}

impl Serialize for TaskStoreConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TaskStoreConfig::Sqlite => s.serialize_str("sqlite"),
            TaskStoreConfig::Postgres { url_env } => PostgresForm {
                url_env: url_env.clone(),
            }
            .serialize(s),
        }
    }
}

/// In the schema of config.yaml: `sqlite`, or `{url_env: VARIABLE}`.
impl schemars::JsonSchema for TaskStoreConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TaskStoreConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "oneOf": [
                {"const": "sqlite", "description": "contexts/tasks.db (one host)"},
                {
                    "type": "object",
                    "description": "PostgreSQL, shared by workers on several hosts",
                    "properties": {
                        "url_env": {
                            "type": "string",
                            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                            "description": "The environment variable holding the PostgreSQL URL (never the URL itself)."
                        }
                    },
                    "required": ["url_env"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

impl TaskStoreConfig {
    /// Check the variable name; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if let TaskStoreConfig::Postgres { url_env } = self {
            let ok = !url_env.is_empty()
                && url_env
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !url_env.starts_with(|c: char| c.is_ascii_digit());
            if !ok {
                return Invalid::err(
                    "task_store.url_env",
                    format!("must be an environment variable name, got `{url_env}`"),
                );
            }
        }
        Ok(())
    }
}

impl Config {
    /// The task store to open: SQLite, or PostgreSQL at the URL read now from the variable
    /// `task_store.url_env` names. Errors name the variable (never its value).
    pub fn store_spec(&self) -> Result<StoreSpec, DbError> {
        match &self.task_store {
            TaskStoreConfig::Sqlite => Ok(StoreSpec::Sqlite),
            TaskStoreConfig::Postgres { url_env } => {
                Ok(StoreSpec::Postgres(PgUrl::from_env(url_env)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Config, String> {
        Config::from_yaml(yaml, "c").map_err(|e| e.to_string())
    }

    #[test]
    fn both_forms_parse_and_round_trip() {
        assert_eq!(parse("").unwrap().task_store, TaskStoreConfig::Sqlite);
        assert_eq!(
            parse("task_store: sqlite\n").unwrap().task_store,
            TaskStoreConfig::Sqlite
        );
        let c = parse("task_store:\n  url_env: MY_DB\n").unwrap();
        assert_eq!(
            c.task_store,
            TaskStoreConfig::Postgres {
                url_env: "MY_DB".into()
            }
        );
        let yaml = serde_norway::to_string(&c).unwrap();
        assert_eq!(parse(&yaml).unwrap(), c);
    }

    #[test]
    fn mistakes_name_the_key() {
        for (yaml, want) in [
            ("task_store: mysql\n", "unknown task store `mysql`"),
            ("task_store: postgres\n", "url_env: VARIABLE"),
            ("task_store:\n  url: postgres://x\n", "expected `sqlite`"),
            ("task_store:\n  url_env: \"my db\"\n", "task_store.url_env"),
        ] {
            let e = parse(yaml).unwrap_err();
            assert!(e.contains(want) && e.contains("task_store"), "{yaml}: {e}");
        }
    }

    #[test]
    fn a_missing_variable_is_named_without_a_value() {
        let c = parse("task_store:\n  url_env: CTXHOST_TEST_SURELY_UNSET_VAR\n").unwrap();
        let e = c.store_spec().unwrap_err().to_string();
        assert!(
            e.contains("CTXHOST_TEST_SURELY_UNSET_VAR") && e.contains("not set"),
            "{e}"
        );
    }
}
