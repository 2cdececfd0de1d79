//! [`ExternalServers`]: the NATS servers (`--nats [NAME=]URL`) and Kafka clusters (`--kafka
//! [NAME=]HOST:PORT[,HOST:PORT...]`) `weir serve` was started with, by name, and the one place
//! where the names a served spec gives (a NATS or Kafka source's `"server"`, a NATS sink's
//! `"nats"`, a Kafka sink's `"kafka"`) become their addresses. A caller of the API names a
//! server; it never gives an address, so it cannot make the server connect where it likes.
//! Specs are stored with the names, so a restart with another address for a name moves every
//! pipeline that uses it.
//!
//! Depends on `names`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::RequestError;

/// The name a lone `--nats URL` is known by.
pub const DEFAULT_SERVER: &str = "default";

/// The NATS servers and Kafka clusters a served pipeline may use, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalServers {
    by_name: BTreeMap<String, String>,
    kafka: BTreeMap<String, String>,
}

/// Why a `--nats` argument was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsArgumentError {
    /// The server's name is not a name.
    #[error("--nats: {0}")]
    Name(#[from] crate::names::NameError),
    /// Not `[NAME=]nats://host:port` or `tls://`.
    #[error("--nats {0:?}: give [NAME=]nats://host:port (or tls://host:port)")]
    NotAUrl(String),
    /// Not `[NAME=]host:port[,host:port...]`.
    #[error("--kafka {0:?}: give [NAME=]host:port[,host:port...] (the bootstrap brokers)")]
    NotBrokers(String),
    /// The same name twice.
    #[error("--nats or --kafka: the name {0:?} is given twice")]
    NameTwice(String),
}

impl ExternalServers {
    /// From the `--nats` arguments: `NAME=URL`, or a lone `URL` named [`DEFAULT_SERVER`].
    pub fn parse(arguments: &[String]) -> Result<ExternalServers, NatsArgumentError> {
        let mut by_name = BTreeMap::new();
        for argument in arguments {
            let (name, url) = match argument.split_once('=') {
                Some((name, url)) if !name.contains("://") => (name, url),
                _ => (DEFAULT_SERVER, argument.as_str()),
            };
            crate::names::check("NATS server name", name)?;
            let scheme = url.starts_with("nats://") || url.starts_with("tls://");
            if !scheme || url.chars().any(char::is_whitespace) {
                return Err(NatsArgumentError::NotAUrl(argument.clone()));
            }
            if by_name.insert(name.to_owned(), url.to_owned()).is_some() {
                return Err(NatsArgumentError::NameTwice(name.to_owned()));
            }
        }
        Ok(ExternalServers {
            by_name,
            kafka: BTreeMap::new(),
        })
    }

    /// With the Kafka clusters of the `--kafka` arguments: `NAME=BROKERS`, or lone `BROKERS`
    /// named [`DEFAULT_SERVER`]; brokers are `host:port`, comma-separated.
    pub fn with_kafka(mut self, arguments: &[String]) -> Result<Self, NatsArgumentError> {
        for argument in arguments {
            let (name, brokers) = argument
                .split_once('=')
                .unwrap_or((DEFAULT_SERVER, argument.as_str()));
            crate::names::check("Kafka cluster name", name)?;
            let broker_like = |b: &str| {
                b.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
                }) && !b.contains("://")
                    && !b.chars().any(char::is_whitespace)
            };
            if brokers.is_empty() || !brokers.split(',').all(broker_like) {
                return Err(NatsArgumentError::NotBrokers(argument.clone()));
            }
            if self
                .kafka
                .insert(name.to_owned(), brokers.to_owned())
                .is_some()
            {
                return Err(NatsArgumentError::NameTwice(name.to_owned()));
            }
        }
        Ok(self)
    }

    /// The addresses a served spec may connect to: the NATS servers' URLs and the Kafka
    /// clusters' broker lists.
    pub fn urls(&self) -> Vec<String> {
        (self.by_name.values())
            .chain(self.kafka.values())
            .cloned()
            .collect()
    }

    /// The URL of server `name`.
    fn url(&self, field: &str, name: &str) -> Result<&str, RequestError> {
        if name.contains("://") {
            return Err(RequestError::Invalid(format!(
                "{field}: name one of the NATS servers weir serve was started with ({}), not an \
                 address: a served pipeline never connects where its spec says",
                self.names()
            )));
        }
        self.by_name.get(name).map(String::as_str).ok_or_else(|| {
            RequestError::Invalid(format!(
                "{field}: weir serve was started with no NATS server named {name:?} (it has: {}; \
                 start it with --nats {name}=nats://host:port)",
                self.names()
            ))
        })
    }

    fn names(&self) -> String {
        names(&self.by_name)
    }

    /// `spec` with each NATS server name replaced by its URL: a NATS source's `"server"`
    /// (default: the only server, or [`DEFAULT_SERVER`]) becomes its `"url"`, a NATS sink's
    /// `"nats"` name its URL. A spec that gives a URL is refused.
    pub fn resolve(&self, spec: &Value) -> Result<Value, RequestError> {
        let mut spec = spec.clone();
        if let Some(source) = spec.get_mut("source").and_then(Value::as_object_mut)
            && source.get("type").and_then(Value::as_str) == Some("nats")
        {
            if source.contains_key("url") {
                return Err(RequestError::Invalid(format!(
                    "source.url: a served pipeline names its NATS server, \"server\": \"{}\" \
                     (one of: {}), never an address",
                    self.default_name(),
                    self.names()
                )));
            }
            let name = match source.remove("server") {
                Some(Value::String(name)) => name,
                None => self.default_name().to_owned(),
                Some(other) => {
                    return Err(RequestError::Invalid(format!(
                        "source.server is the name of a NATS server, not {other}"
                    )));
                }
            };
            let url = self.url("source.server", &name)?;
            source.insert("url".into(), url.into());
        }
        if let Some(source) = spec.get_mut("source").and_then(Value::as_object_mut)
            && source.get("type").and_then(Value::as_str) == Some("kafka")
        {
            if source.contains_key("brokers") {
                return Err(RequestError::Invalid(format!(
                    "source.brokers: a served pipeline names its Kafka cluster, \"server\": \
                     \"NAME\" (one of: {}), never an address",
                    names(&self.kafka)
                )));
            }
            let name = match source.remove("server") {
                Some(Value::String(name)) => name,
                None => default_name(&self.kafka).to_owned(),
                Some(other) => {
                    return Err(RequestError::Invalid(format!(
                        "source.server is the name of a Kafka cluster, not {other}"
                    )));
                }
            };
            let brokers = self.brokers("source.server", &name)?;
            source.insert("brokers".into(), brokers.into());
        }
        self.resolve_workers(&mut spec)?;
        if let Some(sinks) = spec.get_mut("sinks").and_then(Value::as_object_mut) {
            for (field, sink) in sinks.iter_mut() {
                if let Some(name) = sink.get("kafka").and_then(Value::as_str) {
                    let brokers = self.brokers(&format!("sinks.{field}.kafka"), name)?;
                    sink["kafka"] = brokers.to_owned().into();
                    continue;
                }
                let Some(name) = sink.get("nats").and_then(Value::as_str) else {
                    continue;
                };
                let url = self.url(&format!("sinks.{field}.nats"), name)?.to_owned();
                sink["nats"] = url.into();
            }
        }
        Ok(spec)
    }

    /// A pipeline reading a Kafka topic placed on workers names the NATS server whose workers
    /// run it, `"workers": {"server": NAME}` (default: the only server, or
    /// [`DEFAULT_SERVER`]): it becomes `"nats"`, its URL. One reading a NATS stream runs on that
    /// stream's server and names none.
    fn resolve_workers(&self, spec: &mut Value) -> Result<(), RequestError> {
        let source = spec.pointer("/source/type").and_then(Value::as_str);
        let kafka = source == Some("kafka");
        let Some(workers) = spec.get_mut("workers").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        if workers.contains_key("nats") {
            return Err(RequestError::Invalid(format!(
                "workers.nats: a served pipeline names the NATS server of its workers, \
                 \"server\": \"{}\" (one of: {}), never an address",
                self.default_name(),
                self.names()
            )));
        }
        let name = match (kafka, workers.remove("server")) {
            (false, None) => return Ok(()),
            (false, Some(_)) => {
                return Err(RequestError::Invalid(
                    "workers.server: a pipeline reading a NATS stream runs on that stream's \
                     server's workers; leave workers.server out"
                        .into(),
                ));
            }
            (true, None) => self.default_name().to_owned(),
            (true, Some(Value::String(name))) => name,
            (true, Some(other)) => {
                return Err(RequestError::Invalid(format!(
                    "workers.server is the name of a NATS server, not {other}"
                )));
            }
        };
        let url = self.url("workers.server", &name)?.to_owned();
        workers.insert("nats".into(), url.into());
        Ok(())
    }

    /// The brokers of Kafka cluster `name`.
    fn brokers(&self, field: &str, name: &str) -> Result<&str, RequestError> {
        if name.contains(':') {
            return Err(RequestError::Invalid(format!(
                "{field}: name one of the Kafka clusters weir serve was started with ({}), not \
                 an address: a served pipeline never connects where its spec says",
                names(&self.kafka)
            )));
        }
        self.kafka.get(name).map(String::as_str).ok_or_else(|| {
            RequestError::Invalid(format!(
                "{field}: weir serve was started with no Kafka cluster named {name:?} (it has: \
                 {}; start it with --kafka {name}=host:port)",
                names(&self.kafka)
            ))
        })
    }

    /// The name a source without `"server"` uses: the only server, or [`DEFAULT_SERVER`].
    fn default_name(&self) -> &str {
        default_name(&self.by_name)
    }
}

/// The names of `servers`, for a message.
fn names(servers: &BTreeMap<String, String>) -> String {
    if servers.is_empty() {
        return "none".into();
    }
    servers.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// The name a source without `"server"` uses: the only one of `servers`, or
/// [`DEFAULT_SERVER`].
fn default_name(servers: &BTreeMap<String, String>) -> &str {
    match servers.keys().next() {
        Some(only) if servers.len() == 1 => only,
        _ => DEFAULT_SERVER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn servers() -> ExternalServers {
        ExternalServers::parse(&[
            "nats://127.0.0.1:4222".into(),
            "eu=tls://nats.eu:4222".into(),
        ])
        .unwrap()
    }

    #[test]
    fn names_become_urls_and_addresses_are_refused() {
        let spec = json!({
            "source": {"type": "nats", "stream": "clicks"},
            "sinks": {"results": {"nats": "eu", "subject": "out"}, "late": "late.jsonl"},
        });
        let resolved = servers().resolve(&spec).unwrap();
        assert_eq!(resolved["source"]["url"], "nats://127.0.0.1:4222");
        assert_eq!(resolved["sinks"]["results"]["nats"], "tls://nats.eu:4222");
        assert_eq!(resolved["sinks"]["late"], "late.jsonl");
        let named = json!({"source": {"type": "nats", "server": "eu", "stream": "s"}});
        assert_eq!(
            servers().resolve(&named).unwrap()["source"]["url"],
            "tls://nats.eu:4222"
        );
        for hostile in [
            json!({"source": {"type": "nats", "url": "nats://10.0.0.1:4222", "stream": "s"}}),
            json!({"source": {"type": "nats", "server": "nats://10.0.0.1:4222", "stream": "s"}}),
            json!({"source": {"type": "nats", "server": "nowhere", "stream": "s"}}),
            json!({"source": {"type": "nats", "server": 7, "stream": "s"}}),
            json!({"sinks": {"results": {"nats": "nats://10.0.0.1:4222", "subject": "x"}}}),
            json!({"sinks": {"results": {"nats": "nowhere", "subject": "x"}}}),
        ] {
            let refused = servers().resolve(&hostile);
            assert!(
                matches!(refused, Err(RequestError::Invalid(_))),
                "{hostile}"
            );
        }
        let none = ExternalServers::default();
        assert!(none.resolve(&spec).is_err(), "no --nats: no NATS pipeline");
        let http = json!({"source": {"type": "http"}});
        assert_eq!(none.resolve(&http).unwrap(), http);
    }

    #[test]
    fn a_kafka_pipeline_on_workers_names_their_nats_server_and_never_an_address() {
        let servers = servers().with_kafka(&["127.0.0.1:9092".into()]).unwrap();
        let placed = |workers: serde_json::Value| json!({"source": {"type": "kafka", "topic": "clicks"}, "workers": workers});
        // Two NATS servers, one named "default": it is taken when none is named.
        let resolved = servers.resolve(&placed(json!({"slices": 4}))).unwrap();
        assert_eq!(resolved["workers"]["nats"], "nats://127.0.0.1:4222");
        assert_eq!(resolved["workers"]["slices"], 4);
        let resolved = servers.resolve(&placed(json!({"server": "eu"}))).unwrap();
        assert_eq!(resolved["workers"]["nats"], "tls://nats.eu:4222");
        assert!(resolved["workers"].get("server").is_none());
        for hostile in [
            placed(json!({"nats": "nats://10.0.0.1:4222"})),
            placed(json!({"server": "nats://10.0.0.1:4222"})),
            placed(json!({"server": "nowhere"})),
            placed(json!({"server": 7})),
            json!({"source": {"type": "nats", "stream": "s"}, "workers": {"server": "eu"}}),
            json!({"source": {"type": "nats", "stream": "s"}, "workers": {"nats": "nats://x:1"}}),
        ] {
            let refused = servers.resolve(&hostile);
            assert!(
                matches!(refused, Err(RequestError::Invalid(_))),
                "{hostile}"
            );
        }
        let nats = json!({"source": {"type": "nats", "stream": "s"}, "workers": {"slices": 2}});
        assert_eq!(
            servers.resolve(&nats).unwrap()["workers"],
            json!({"slices": 2})
        );
    }

    #[test]
    fn kafka_cluster_names_become_brokers_and_addresses_are_refused() {
        let servers = ExternalServers::default()
            .with_kafka(&[
                "127.0.0.1:9092,127.0.0.1:9093".into(),
                "eu=k.eu:9092".into(),
            ])
            .unwrap();
        let spec = json!({
            "source": {"type": "kafka", "topic": "clicks"},
            "sinks": {"results": {"kafka": "eu", "topic": "out"}},
        });
        let resolved = servers.resolve(&spec).unwrap();
        assert_eq!(
            resolved["source"]["brokers"],
            "127.0.0.1:9092,127.0.0.1:9093"
        );
        assert_eq!(resolved["sinks"]["results"]["kafka"], "k.eu:9092");
        assert!(servers.urls().contains(&"k.eu:9092".to_owned()));
        for hostile in [
            json!({"source": {"type": "kafka", "brokers": "10.0.0.1:9092", "topic": "t"}}),
            json!({"source": {"type": "kafka", "server": "10.0.0.1:9092", "topic": "t"}}),
            json!({"source": {"type": "kafka", "server": "nowhere", "topic": "t"}}),
            json!({"sinks": {"results": {"kafka": "10.0.0.1:9092", "topic": "x"}}}),
            json!({"sinks": {"results": {"kafka": "nowhere", "topic": "x"}}}),
        ] {
            let refused = servers.resolve(&hostile);
            assert!(
                matches!(refused, Err(RequestError::Invalid(_))),
                "{hostile}"
            );
        }
        for bad in [
            vec!["".to_owned()],
            vec!["host".into()],
            vec!["x=kafka://h:1".into()],
            vec!["h:1".into(), "h:2".into()],
            vec!["../x=h:1".into()],
            vec!["h:0".into()],
        ] {
            assert!(
                ExternalServers::default().with_kafka(&bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_flags_are_checked() {
        let one = ExternalServers::parse(&["nats://h:1".into()]).unwrap();
        assert_eq!(one.urls(), ["nats://h:1"]);
        for bad in [
            vec!["h:1".to_owned()],
            vec!["x=http://h:1".into()],
            vec!["nats://a:1".into(), "nats://b:1".into()],
            vec!["../x=nats://h:1".into()],
        ] {
            assert!(ExternalServers::parse(&bad).is_err(), "{bad:?}");
        }
    }
}
