//! The host side of the `scope` resource: the state imports a guest calls during a call. Depends on
//! nothing outside `operator`.

use super::*;

impl wit_state::Host for HostData {}

impl wit_state::HostScope for HostData {
    fn key(&mut self, scope: Resource<ScopeSlot>) -> wasmtime::Result<String> {
        Ok(self.table.get(&scope)?.key.to_string())
    }

    fn get(
        &mut self,
        scope: Resource<ScopeSlot>,
        name: String,
    ) -> wasmtime::Result<Option<wit::Value>> {
        Ok(self.table.get(&scope)?.get(&name).map(to_wit))
    }

    fn put(
        &mut self,
        scope: Resource<ScopeSlot>,
        name: String,
        value: wit::Value,
    ) -> wasmtime::Result<()> {
        self.table.get_mut(&scope)?.put(name, from_wit(value));
        Ok(())
    }

    fn remove(&mut self, scope: Resource<ScopeSlot>, name: String) -> wasmtime::Result<()> {
        self.table.get_mut(&scope)?.remove(name);
        Ok(())
    }

    fn map_get(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
        entry: String,
    ) -> wasmtime::Result<Option<wit::Value>> {
        Ok(self.table.get(&scope)?.map_get(&map, &entry).map(to_wit))
    }

    fn map_put(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
        entry: String,
        value: wit::Value,
    ) -> wasmtime::Result<()> {
        self.table
            .get_mut(&scope)?
            .map_put(map, entry, from_wit(value));
        Ok(())
    }

    fn map_remove(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
        entry: String,
    ) -> wasmtime::Result<()> {
        self.table.get_mut(&scope)?.map_remove(map, entry);
        Ok(())
    }

    fn map_len(&mut self, scope: Resource<ScopeSlot>, map: String) -> wasmtime::Result<u64> {
        Ok(self.table.get(&scope)?.map_len(&map))
    }

    fn map_entries(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
    ) -> wasmtime::Result<Vec<String>> {
        Ok(self.table.get(&scope)?.map_entries(&map))
    }

    fn drop(&mut self, _scope: Resource<ScopeSlot>) -> wasmtime::Result<()> {
        // Scopes are only ever lent to guests (`borrow<scope>`); the host removes them itself
        // after each call.
        Ok(())
    }
}
