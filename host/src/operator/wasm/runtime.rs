//! The engine, the linker with Weir's imports, loading and checking components (world,
//! imports, digest), and the compiled-component cache of this process. Depends on `spec`.

use super::compile_cache::CompileCache;
use super::*;

/// Which world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentKind {
    /// `aggregator`: exports `aggregate`.
    Aggregate,
    /// `enricher`: exports `enrich`.
    Enrich,
}

impl ComponentKind {
    /// The WIT world's name.
    pub fn world(self) -> &'static str {
        match self {
            ComponentKind::Aggregate => "aggregator",
            ComponentKind::Enrich => "enricher",
        }
    }
}

/// How often the epoch ticks; call deadlines are whole ticks.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The process's wasmtime engine and the linker every operator is instantiated with.
#[derive(Clone)]
pub struct WasmRuntime {
    pub(super) engine: Engine,
    pub(super) linker: Arc<Linker<HostData>>,
    /// Compiled components by the SHA-256 of their bytes: each is compiled once per process.
    pub(super) compiled: Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], Component>>>,
    /// Compiled components on disk, so that each is compiled once per machine.
    disk: Option<CompileCache>,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WasmRuntime")
    }
}

pub(super) fn read_component(path: &Path) -> std::result::Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

/// `sha256:<hex>` of a component's bytes: how the registry names and checks what it stores.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", <sha2::Sha256 as sha2::Digest>::digest(bytes))
}

/// See [`WasmRuntime::use_memory_images`].
static MEMORY_IMAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

impl WasmRuntime {
    /// The shared runtime, created on first use with its epoch ticker.
    pub fn shared() -> std::result::Result<WasmRuntime, LoadError> {
        static RUNTIME: OnceLock<std::result::Result<WasmRuntime, Arc<wasmtime::Error>>> =
            OnceLock::new();
        RUNTIME
            .get_or_init(|| Self::new().map_err(Arc::new))
            .clone()
            // Its message only: `LoadError` is of the trait layer, which names no Wasm type.
            .map_err(|e| LoadError::Engine(e.to_string()))
    }

    /// Whether instances start from copy-on-write memory images (the default: faster
    /// instantiation). Call before the runtime is first used; `weir build` turns them off for
    /// its short example runs, where sealing an image's memfd can fail with `EBUSY` while the
    /// kernel waits out page references.
    pub fn use_memory_images(on: bool) {
        MEMORY_IMAGES.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn new() -> wasmtime::Result<WasmRuntime> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.memory_init_cow(MEMORY_IMAGES.load(std::sync::atomic::Ordering::Relaxed));
        config.epoch_interruption(true);
        // Traps are reported by their cause; a symbolised backtrace per trap would cost far
        // more than the trap itself when a guest traps on every event of some keys.
        config.wasm_backtrace_max_frames(None);
        config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Disable);
        if std::env::var_os("WEIR_PERF_MAP").is_some() {
            // Names the guests' compiled functions for `perf report` (/tmp/perf-<pid>.map).
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        wit_state::add_to_linker::<HostData, HasSelf<HostData>>(&mut linker, |data| data)?;
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || {
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(wasmtime::Error::from)?;
        let disk = CompileCache::from_env(&engine);
        Ok(WasmRuntime {
            engine,
            linker: Arc::new(linker),
            compiled: Arc::default(),
            disk,
        })
    }

    /// Loads a component file and checks that it implements `kind`'s world and imports only
    /// what Weir provides.
    pub fn load(
        &self,
        path: &Path,
        kind: ComponentKind,
    ) -> std::result::Result<WasmOperator, LoadError> {
        self.load_bytes(path, &read_component(path)?, kind)
    }

    /// Like [`load`](Self::load), for a stored component whose bytes must have the digest
    /// `sha256:<hex>` recorded when it was uploaded.
    pub fn load_checked(
        &self,
        path: &Path,
        digest: &str,
        kind: ComponentKind,
    ) -> std::result::Result<WasmOperator, LoadError> {
        let bytes = read_component(path)?;
        let actual = digest_of(&bytes);
        if actual != digest {
            return Err(LoadError::DigestMismatch {
                path: path.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        self.load_bytes(path, &bytes, kind)
    }

    /// Compiles a component, or takes it from the cache of this process or the one on disk.
    fn compile(&self, path: &Path, bytes: &[u8]) -> std::result::Result<Component, LoadError> {
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(bytes).into();
        let in_memory = self
            .compiled
            .lock()
            .expect("compile cache lock")
            .get(&digest)
            .cloned();
        if let Some(component) = in_memory {
            return Ok(component);
        }
        let started = std::time::Instant::now();
        let on_disk = self
            .disk
            .as_ref()
            .and_then(|disk| disk.load(&self.engine, &digest));
        let from_disk = on_disk.is_some();
        let component = match on_disk {
            Some(component) => component,
            None => {
                let component =
                    Component::new(&self.engine, bytes).map_err(|e| LoadError::NotAComponent {
                        path: path.to_owned(),
                        message: root_cause(&e),
                    })?;
                if let Some(disk) = &self.disk {
                    disk.store(&digest, &component);
                }
                component
            }
        };
        tracing::info!(
            path = %path.display(),
            from_disk,
            bytes = bytes.len(),
            ms = started.elapsed().as_millis() as u64,
            "operator component ready"
        );
        self.compiled
            .lock()
            .expect("compile cache lock")
            .insert(digest, component.clone());
        Ok(component)
    }

    /// Which of Weir's worlds a component implements, checking it fully (it is then cached).
    pub fn kind_of(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> std::result::Result<ComponentKind, LoadError> {
        match self.load_bytes(path, bytes, ComponentKind::Aggregate) {
            Ok(_) => Ok(ComponentKind::Aggregate),
            Err(LoadError::WrongWorld { .. }) => self
                .load_bytes(path, bytes, ComponentKind::Enrich)
                .map(|_| ComponentKind::Enrich),
            Err(e) => Err(e),
        }
    }

    pub fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        kind: ComponentKind,
    ) -> std::result::Result<WasmOperator, LoadError> {
        let component = self.compile(path, bytes)?;
        let exports: Vec<String> = component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let (needed, other, hint) = match kind {
            ComponentKind::Aggregate => (
                AGGREGATE_EXPORTS,
                ENRICH_EXPORTS,
                "it looks like an enrichment operator: use kind = \"enrich\"",
            ),
            ComponentKind::Enrich => (
                ENRICH_EXPORTS,
                AGGREGATE_EXPORTS,
                "it looks like an aggregate operator: use kind = \"aggregate\"",
            ),
        };
        let exported = |names: &[&str]| names.iter().position(|n| exports.iter().any(|e| e == n));
        let Some(version) = exported(needed) else {
            let hint = if exported(other).is_some() {
                hint
            } else {
                "build it with the weir-sdk crate (or another binding generator) against wit/v0.3/operator.wit, wit/v0.2/operator.wit or wit/operator.wit"
            };
            return Err(LoadError::WrongWorld {
                path: path.to_owned(),
                expected: kind.world(),
                exports: if exports.is_empty() {
                    "nothing".into()
                } else {
                    exports.join(", ")
                },
                hint,
            });
        };
        let link = |e: wasmtime::Error| LoadError::Link {
            path: path.to_owned(),
            message: root_cause(&e),
        };
        let pre = self.linker.instantiate_pre(&component).map_err(link)?;
        // `version` indexes the export lists, newest first.
        let instantiator = match (kind, version) {
            (ComponentKind::Aggregate, 0) => {
                Instantiator::AggregateV3(bindings_v3::AggregatorPre::new(pre).map_err(link)?)
            }
            (ComponentKind::Aggregate, 1) => {
                Instantiator::AggregateV2(bindings_v2::AggregatorPre::new(pre).map_err(link)?)
            }
            (ComponentKind::Aggregate, _) => {
                Instantiator::Aggregate(bindings::AggregatorPre::new(pre).map_err(link)?)
            }
            (ComponentKind::Enrich, 0) => {
                Instantiator::EnrichV2(enricher_bindings_v2::EnricherPre::new(pre).map_err(link)?)
            }
            (ComponentKind::Enrich, _) => {
                Instantiator::Enrich(enricher_bindings::EnricherPre::new(pre).map_err(link)?)
            }
        };
        Ok(WasmOperator {
            engine: self.engine.clone(),
            instantiator,
            path: path.to_owned(),
        })
    }
}

pub(super) fn root_cause(e: &wasmtime::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

#[derive(Clone)]
pub(super) enum Instantiator {
    Aggregate(bindings::AggregatorPre<HostData>),
    AggregateV2(bindings_v2::AggregatorPre<HostData>),
    AggregateV3(bindings_v3::AggregatorPre<HostData>),
    Enrich(enricher_bindings::EnricherPre<HostData>),
    EnrichV2(enricher_bindings_v2::EnricherPre<HostData>),
}

/// A loaded, checked, compiled component, ready to be instantiated once per shard.
#[derive(Clone)]
pub struct WasmOperator {
    pub(super) engine: Engine,
    pub(super) instantiator: Instantiator,
    pub(super) path: PathBuf,
}

impl std::fmt::Debug for WasmOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmOperator")
            .field("path", &self.path)
            .finish()
    }
}

impl WasmOperator {
    /// Whether its aggregate instances make calls carrying many windows (a component on
    /// contract 0.3), until one traps.
    pub fn carries_windows(&self) -> bool {
        matches!(self.instantiator, Instantiator::AggregateV3(_))
    }

    /// A new aggregate instance, passed the fields `projection` selects.
    pub fn aggregate(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<WasmAggregate, LoadError> {
        let guest = Guest::new(self.clone(), limits)?;
        Ok(WasmAggregate {
            carries_windows: matches!(guest.bindings, Bindings::AggregateV3(_)),
            guest,
            projection,
        })
    }

    /// A new enrichment instance, passed the fields `projection` selects.
    pub fn enrich(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<WasmEnrich, LoadError> {
        Ok(WasmEnrich {
            guest: Guest::new(self.clone(), limits)?,
            projection,
            names: Default::default(),
        })
    }
}
