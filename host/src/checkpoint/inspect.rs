//! `weir state`: reading a data directory offline: the last checkpoint's manifest, window
//! metadata and state scopes, as JSON, optionally for one key. Depends on `state`.

use std::path::Path;

use super::{MARKER_FILE, Manifest};
use crate::state::{
    KEY_GROUPS, Namespace, RedbStore, RowError, ScopeState, StateError, StateKey, StoreDamage,
    key_group, redb_backend::STATE_FILE,
};

/// What a data directory holds.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The last committed checkpoint.
    pub manifest: Option<Manifest>,
    /// Window metadata rows, as JSON objects.
    pub windows: Vec<serde_json::Value>,
    /// State scopes, as JSON objects.
    pub state: Vec<serde_json::Value>,
}

fn describe(key: &StateKey) -> serde_json::Map<String, serde_json::Value> {
    let mut object = serde_json::Map::new();
    object.insert("key".into(), key.key.to_string().into());
    object.insert("key_group".into(), key.group.into());
    object.insert("operator".into(), key.operator.into());
    if let Namespace::Window { start, end } = key.namespace {
        object.insert("window_start".into(), start.into());
        object.insert("window_end".into(), end.into());
    }
    object
}

/// Reads a data directory. With `key`, only that key's rows (found by its key group).
pub fn inspect(dir: &Path, key: Option<&str>) -> Result<Inspection, StateError> {
    let file = dir.join(STATE_FILE);
    if !file.exists() {
        return Err(StateError::Store {
            path: file,
            message: format!(
                "no state here: is {} a Weir data directory (it has no {STATE_FILE} or {MARKER_FILE})?",
                dir.display()
            ),
        });
    }
    let store = RedbStore::open(dir)?;
    let manifest = store
        .manifest()?
        .map(|bytes| serde_json::from_slice(&bytes))
        .transpose()
        .map_err(|e| StateError::Damaged {
            path: store.path().to_owned(),
            source: StoreDamage::Manifest(e),
        })?;
    let (start, end) = match key {
        Some(k) => {
            let group = key_group(k);
            (
                StateKey::group_start(group),
                if group + 1 == KEY_GROUPS {
                    vec![0xff; 3]
                } else {
                    StateKey::group_start(group + 1)
                },
            )
        }
        None => (Vec::new(), vec![0xff; 3]),
    };
    let corrupt = |source: StoreDamage| StateError::Damaged {
        path: store.path().to_owned(),
        source,
    };
    let mut windows = Vec::new();
    for row in store.scan(true, &start, &end)? {
        let state_key = StateKey::decode(&row.key)
            .ok_or_else(|| corrupt(RowError::MalformedKey("window").into()))?;
        if key.is_some_and(|k| k != &*state_key.key) {
            continue;
        }
        let mut object = describe(&state_key);
        let record: serde_json::Value = serde_json::from_slice(&row.value)
            .map_err(|e| corrupt(RowError::WindowRecord(e).into()))?;
        object.insert("metadata".into(), record);
        windows.push(serde_json::Value::Object(object));
    }
    let mut state = Vec::new();
    for row in store.scan(false, &start, &end)? {
        let state_key = StateKey::decode(&row.key)
            .ok_or_else(|| corrupt(RowError::MalformedKey("state").into()))?;
        if key.is_some_and(|k| k != &*state_key.key) {
            continue;
        }
        let scope: ScopeState =
            crate::state::decode_scope(&row.value).map_err(|e| corrupt(e.into()))?;
        let mut object = describe(&state_key);
        object.insert(
            "value".into(),
            serde_json::to_value(&scope).expect("scopes serialise"),
        );
        state.push(serde_json::Value::Object(object));
    }
    Ok(Inspection {
        manifest,
        windows,
        state,
    })
}
