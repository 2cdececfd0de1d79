//! The route table: every route of the API with the access it needs, what it does and every
//! status it can answer. Authorisation decides from this table by the matched route (method and
//! route template), never from the path's text, and `/openapi.json` is generated from it, so
//! the document, the checks and the router cannot drift apart.
//!
//! Depends on `serve`.

use axum::http::Method;

use crate::serve::Scope;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (liveness, the API description).
    Public,
    /// A token with this scope (an admin token has every scope).
    Token(Scope),
}

/// One route.
#[derive(Debug, Clone)]
pub struct Route {
    /// The method.
    pub method: Method,
    /// The route template, as axum matches it (`/v1/pipelines/{name}`).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// What it does.
    pub summary: &'static str,
    /// Every status it can answer, with what each means.
    pub responses: &'static [(u16, &'static str)],
}

const ADMIN: Access = Access::Token(Scope::Admin);
/// Reading: admin, deploy, read and ingest tokens.
const READ: Access = Access::Token(Scope::Read);
/// Making and changing: admin and deploy tokens.
const DEPLOY: Access = Access::Token(Scope::Deploy);

/// Answers every token-checked route can give, besides its own.
pub const AUTH_RESPONSES: &[(u16, &str)] = &[
    (
        401,
        "no token, a malformed Authorization header, or an unknown token",
    ),
    (
        403,
        "the token's scope does not allow this route, or the token is narrowed to pipelines or bound to a tenant and the route is not one it may use (a route naming a pipeline or operator version outside them answers 404, as for one that does not exist)",
    ),
    (400, "a name in the path breaks the name rule"),
    (
        503,
        "the server, this token (half of --max-inflight) or this pipeline (a quarter) receives as many request body bytes as allowed; retry after Retry-After",
    ),
    (
        408,
        "the request body arrived slower than --min-body-rate after --header-timeout; nothing of it was kept",
    ),
    (500, "the server failed; its log has the details"),
];

macro_rules! route {
    ($method:ident $path:literal, $access:expr, $summary:literal, [$(($code:literal, $text:literal)),* $(,)?]) => {
        Route {
            method: Method::$method,
            path: $path,
            access: $access,
            summary: $summary,
            responses: &[$(($code, $text)),*],
        }
    };
}

/// Every route of the API.
pub const ROUTES: &[Route] = &[
    route!(GET "/healthz", Access::Public, "Liveness and pipeline health (counts; names and reasons with an admin token)",
        [(200, "healthy"), (503, "a pipeline stopped responding, or failed while it should run")]),
    route!(GET "/openapi.json", Access::Public, "This document", [(200, "OpenAPI 3.1")]),
    route!(GET "/", Access::Public, "The web console (its data comes from this API, with the token signed in with)",
        [(200, "the console's page")]),
    route!(GET "/console/{file}", Access::Public, "The console's script and style sheet",
        [(200, "the file"), (404, "no such file")]),
    route!(GET "/v1/whoami", READ, "The token's name, scopes, tenant and pipelines (what the console may show)",
        [(200, "{\"name\", \"scopes\", \"tenant\", \"pipelines\"}")]),
    route!(GET "/metrics", Access::Token(Scope::Metrics), "Prometheus metrics (metrics or admin token; or no token on --metrics-listen)",
        [(200, "text exposition format")]),
    route!(GET "/v1/audit", ADMIN, "The latest state-changing calls on record (?limit=N, default 100, at most 10000; oldest first): who (the token's name), method, route, path, status, at_ms. Every call but reads and ingest is put on record, synced, before its answer leaves",
        [(200, "the records"), (400, "a bad limit")]),
    route!(GET "/v1/tokens", ADMIN, "Every token: those set at start ({name, scopes, quotas}) and those made over the API ({name, scopes, pipelines, expires_at_ms, quotas, created_at_ms, created_by, rotated_at_ms}); never a secret",
        [(200, "{set_at_start, made}")]),
    route!(POST "/v1/tokens", ADMIN, "Make a token: {name, scopes, tenant, pipelines (only these; any scope but metrics), expires_in_s, max_pipelines, max_operators}; a tenant's tokens are named '<tenant>.<name>'; none outlives or may own more than its maker; kept as a SHA-256 digest, accepted at once; its secret is in this answer only",
        [(201, "the token, with its secret in `token`"), (400, "a bad name, scope, pipeline list or life"), (409, "the name is taken (made here, or set at start), or the tenant's max_tokens or the server's 10,000 tokens exist"), (507, "the disk is full")]),
    route!(DELETE "/v1/tokens/{name}", ADMIN, "Revoke a token made over the API: refused from the moment this answers",
        [(204, "revoked"), (404, "no such token made over the API"), (409, "set at start: change it there and restart")]),
    route!(POST "/v1/tokens/{name}/rotate", ADMIN, "A new secret for a token made over the API (its name, scopes and what it owns stay); the old secret is refused from the moment this answers",
        [(200, "the token, with its new secret in `token`"), (404, "no such token made over the API"), (409, "set at start: change it there and restart"), (507, "the disk is full")]),
    route!(GET "/v1/tenants", ADMIN, "Tenants and their quotas: {defaults, tenants: {name: {quota, pipelines, operators}}} (a tenant's token sees its own)",
        [(200, "the tenants")]),
    route!(PUT "/v1/tenants/{name}", ADMIN, "Set a tenant's quotas (a server admin's token, bound to no tenant): {max_pipelines, max_operators, max_tokens, shards, cpu, total_memory, state_bytes, max_events_per_second}, each left out taking its default; they apply to the tenant's next creates and uploads",
        [(200, "the tenant's quota"), (400, "a bad name or quota"), (403, "a tenant's token"), (409, "1,000 tenants have quotas already"), (507, "the disk is full")]),
    route!(GET "/v1/operators", READ, "List operator versions (GET /healthz lists registry entries that could not be read)",
        [(200, "versions")]),
    route!(POST "/v1/operators/{name}/{version}", DEPLOY, "Upload a component (body: its bytes); with ?verify=<pipeline>:<savepoint> its migrate first converts every state of that savepoint another version wrote, and the first it cannot is the 400's counterexample; with ?verify=examples the examples it carries (weir build embeds them) run first, and the first that does not hold is the 400's",
        [(201, "the version (with `verified`: the dry run's scopes, when asked)"), (400, "not a Weir component, a bad name, or its migrate failed on the savepoint (the counterexample)"), (404, "the pipeline or savepoint to verify against is unknown"), (429, "a replay or another dry run is running"), (409, "version exists, or was deleted with other bytes (versions never change)"), (413, "too large"), (507, "the disk is full")]),
    route!(GET "/v1/operators/{name}/{version}", READ, "One version",
        [(200, "the version"), (404, "unknown")]),
    route!(DELETE "/v1/operators/{name}/{version}", ADMIN, "Delete a version",
        [(204, "deleted"), (404, "unknown"), (409, "in use by a pipeline (live or candidate)")]),
    route!(GET "/v1/pipelines", READ, "List pipelines with status (damaged ones as failed, with the reason)",
        [(200, "statuses")]),
    route!(POST "/v1/pipelines", DEPLOY, "Create a pipeline from a JSON spec",
        [(201, "status"), (400, "invalid spec (the reason names the field)"), (409, "name taken"), (413, "too large"), (507, "the disk is full")]),
    route!(GET "/v1/pipelines/{name}", READ, "Pipeline status",
        [(200, "status"), (404, "unknown")]),
    route!(GET "/v1/pipelines/{name}/spec", READ, "The pipeline's spec, as created (the live version as promoted)",
        [(200, "the spec"), (404, "unknown"), (409, "damaged")]),
    route!(GET "/v1/pipelines/{name}/dead-letters", READ, "The most recent dead letters (?limit=N, at most 100, default 20), oldest first",
        [(200, "[{line, raw, reason, cause}]"), (400, "a bad limit"), (404, "unknown"), (409, "the dead letters do not go to a file")]),
    route!(DELETE "/v1/pipelines/{name}", ADMIN, "Stop and delete a pipeline with all its files",
        [(204, "deleted"), (404, "unknown"), (409, "still stopping: try again")]),
    route!(POST "/v1/pipelines/{name}/start", DEPLOY, "Start (resumes from the last checkpoint)",
        [(200, "status"), (404, "unknown"), (409, "damaged, or still stopping")]),
    route!(POST "/v1/pipelines/{name}/stop", DEPLOY, "Stop after a final checkpoint",
        [(200, "stopped"), (202, "stopping: the pipeline is busy and stops in the background"), (404, "unknown"), (409, "damaged")]),
    route!(POST "/v1/pipelines/{name}/events", Access::Token(Scope::Ingest), "Send events: JSON Lines or a JSON array; durable before 202",
        [(202, "{\"accepted\": n}"), (400, "the body is not UTF-8 or not a JSON array"), (404, "unknown"), (409, "not running, or no HTTP source"), (413, "too large, or more than 100,000 events"), (429, "the pipeline handles 8 ingest requests already: retry after Retry-After"), (507, "the disk is full: nothing of the batch was kept")]),
    route!(GET "/v1/pipelines/{name}/results", READ, "Result records as Server-Sent Events (id: byte offset; resumes after Last-Event-ID)",
        [(200, "text/event-stream"), (400, "Last-Event-ID is not a number, or not where a record ends"), (404, "unknown"), (409, "the results do not go to a file, so they cannot be resumed")]),
    route!(POST "/v1/pipelines/{name}/rollout", DEPLOY, "Roll out a version: {version, percent | steps+every, shadow, policy}",
        [(200, "status"), (400, "invalid request"), (404, "unknown"), (409, "damaged")]),
    route!(POST "/v1/pipelines/{name}/rollback", DEPLOY, "Roll back: every key to the live version",
        [(200, "status"), (404, "unknown"), (409, "no rollout")]),
    route!(POST "/v1/pipelines/{name}/promote", DEPLOY, "Promote the candidate: it becomes the live version at the next barrier",
        [(200, "status"), (404, "unknown"), (409, "no rollout, or it was rolled back")]),
    route!(POST "/v1/pipelines/{name}/savepoints", DEPLOY, "Take a savepoint {name}: a running pipeline's next checkpoint, a stopped one's last; it keeps the ingest log from its offset on. Of a pipeline on workers: every slice's first checkpoint uploaded after the request (a stopped one's last), copied from the cluster, with each slice's position under `slices`",
        [(201, "the savepoint"), (400, "a bad name"), (404, "unknown pipeline"), (409, "exists, 32 savepoints already, no checkpoint yet, or the pipeline stopped or failed first"), (429, "no checkpoint within 60 s: it is taken at the next one"), (503, "the cluster's NATS server does not answer"), (507, "the disk is full: answered at once")]),
    route!(POST "/v1/pipelines/{name}/replay", DEPLOY, "Replay recorded input through two versions in a sandbox: {versions: [a, b], keys | sample, from, to, savepoint}; both versions' results per window, differences marked",
        [(200, "the comparison"), (400, "invalid request"), (404, "unknown pipeline, version or savepoint"), (409, "no keyed aggregate, the log before the start was truncated (replay from a savepoint), the savepoint is damaged, or the pipeline was deleted during the replay"), (413, "more than 1 GiB of log to replay"), (429, "another replay is running")]),
    route!(POST "/v1/pipelines/{name}/repro", DEPLOY, "A repro bundle for a row: {row: a result, shadow result, replay row or dead letter, versions: [live, candidate] (default: the live one and the row's own, or the rollout's candidate)}; the key's events in that window from the pipeline's input (ingest log, NATS stream or Kafka topic) and what each version gives for them alone",
        [(200, "the bundle"), (400, "a row that names no window (a late event, an input dead letter), a bad key or version"), (404, "unknown pipeline or version, or no event of the key in the window in the input"), (409, "both versions give the same, no single keyed aggregate fed straight from the input, or the log before the window was truncated"), (413, "more than 10,000 events in the window"), (429, "a replay or another sandboxed run is running, or the stream or topic was not read to where the pipeline read within 120 s"), (503, "the stream or topic cannot be read now")]),
    route!(POST "/v1/pipelines/{name}/quarantine/redrive", DEPLOY, "Re-drive parked keys (a pipeline with a quarantine): {keys: [...]}, or {} for every parked key; their parked events go through the version now serving them, in order, exactly once",
        [(202, "the re-drive is in the ingest log: {redriving}"), (400, "a bad key list"), (404, "unknown pipeline"), (409, "no quarantine, a NATS-fed or worker pipeline, or deleted"), (507, "the disk is full")]),
    route!(GET "/v1/pipelines/{name}/savepoints", READ, "List the pipeline's savepoints",
        [(200, "savepoints, then those that cannot be read as {name, damaged}"), (404, "unknown pipeline")]),
    route!(DELETE "/v1/pipelines/{name}/savepoints/{savepoint}", ADMIN, "Delete a savepoint (the ingest log it kept may then be truncated)",
        [(204, "deleted"), (404, "unknown")]),
    route!(POST "/v1/pipelines/{name}/savepoints/{savepoint}/fork", DEPLOY, "Create a new pipeline (body: its spec) from a savepoint: its state, and the ingest log after it; created stopped. A savepoint of a pipeline on workers makes a pipeline on workers with as many slices, each seeded from its slice at the first start",
        [(201, "the new pipeline's status"), (400, "invalid spec, another key, window or chain than the savepoint's, or another placement or slice count"), (404, "unknown pipeline or savepoint"), (409, "name taken, or the savepoint is damaged"), (507, "the disk is full")]),
];

/// The route with this method and template.
pub fn find(method: &Method, path: &str) -> Option<&'static Route> {
    ROUTES
        .iter()
        .find(|route| route.method == *method && route.path == path)
}
