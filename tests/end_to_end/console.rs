//! The web console (issue 15) in real browsers: Debian's Chromium, headless, driven through
//! chromedriver (WebDriver over HTTP), and Debian's Firefox ESR, headless, driven through its
//! Marionette protocol, each against a real `weir serve` on loopback. Sign in, create a
//! pipeline from the page, send events and watch the charts, the figures and the result tail
//! follow the API; upload a version through the registry page; step a rollout and roll it back
//! with the page's buttons; an ingest token sees everything and can change nothing; a dead
//! letter carrying markup is shown as text. Screenshots of every page are saved under
//! `target/console-screenshots/` (one is in the README). The pipelines list is also shown with
//! 100 pipelines, after signing in with the keyboard alone.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{ADMIN, INGEST, Server, count_sum_v1, count_sum_v2};

/// How the test talks to a browser: chromedriver's WebDriver over HTTP (Chromium), or
/// Firefox's own Marionette protocol over TCP (Debian has no geckodriver; Marionette is what
/// geckodriver speaks to Firefox). Both carry the same WebDriver commands.
enum Driver {
    Chromium {
        driver: Child,
        base: String,
        session: String,
        agent: ureq::Agent,
    },
    Firefox {
        browser: Child,
        connection: std::sync::Mutex<(std::net::TcpStream, u64)>,
    },
}

/// A headless browser session.
struct Browser {
    driver: Driver,
    /// Names the screenshots.
    name: &'static str,
    _profile: tempfile::TempDir,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    fn chromium() -> Browser {
        Browser::chromium_with(&[])
    }

    /// Chromium with `extra` command-line arguments.
    fn chromium_with(extra: &[String]) -> Browser {
        let port = free_port();
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is installed (make setup installs chromium-driver)");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while agent.get(format!("{base}/status")).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
        ]
        .map(str::to_owned)
        .to_vec();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.extend_from_slice(extra);
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let answer = http(
            &agent,
            "POST",
            &format!("{base}/session"),
            Some(capabilities),
        );
        let session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Browser {
            driver: Driver::Chromium {
                driver,
                base,
                session,
                agent,
            },
            name: "chromium",
            _profile: profile,
        }
    }

    fn firefox() -> Browser {
        let port = free_port();
        let profile = tempfile::tempdir().unwrap();
        std::fs::write(
            profile.path().join("user.js"),
            format!(
                "user_pref(\"marionette.port\", {port});\nuser_pref(\"browser.shell.checkDefaultBrowser\", false);\n"
            ),
        )
        .unwrap();
        let browser = Command::new("/usr/bin/firefox-esr")
            .args(["--marionette", "--headless", "--no-remote", "--profile"])
            .arg(profile.path())
            .env("MOZ_HEADLESS_WIDTH", "1400")
            .env("MOZ_HEADLESS_HEIGHT", "1000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("firefox-esr is installed (make setup installs it)");
        let deadline = Instant::now() + Duration::from_secs(60);
        let stream = loop {
            if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                break stream;
            }
            assert!(
                Instant::now() < deadline,
                "Firefox's Marionette did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let browser = Browser {
            driver: Driver::Firefox {
                browser,
                connection: std::sync::Mutex::new((stream, 0)),
            },
            name: "firefox",
            _profile: profile,
        };
        browser.marionette_read(); // the greeting
        browser.marionette(
            "WebDriver:NewSession",
            json!({"capabilities": {"alwaysMatch": {}}}),
        );
        browser
    }

    /// One Marionette command: `[0, id, name, params]` out, `[1, id, error, result]` back,
    /// each framed as `<length>:<json>`.
    fn marionette(&self, name: &str, params: Value) -> Value {
        let Driver::Firefox { connection, .. } = &self.driver else {
            unreachable!("Firefox only")
        };
        let id = {
            let mut connection = connection.lock().unwrap();
            connection.1 += 1;
            let message = json!([0, connection.1, name, params]).to_string();
            std::io::Write::write_all(
                &mut connection.0,
                format!("{}:{message}", message.len()).as_bytes(),
            )
            .unwrap();
            connection.1
        };
        let answer = self.marionette_read();
        assert_eq!(answer[1], id, "{answer}");
        answer[3].clone()
    }

    fn marionette_read(&self) -> Value {
        let Driver::Firefox { connection, .. } = &self.driver else {
            unreachable!("Firefox only")
        };
        let mut connection = connection.lock().unwrap();
        let mut length = Vec::new();
        let mut byte = [0u8];
        loop {
            std::io::Read::read_exact(&mut connection.0, &mut byte).unwrap();
            if byte[0] == b':' {
                break;
            }
            length.push(byte[0]);
        }
        let length: usize = String::from_utf8(length).unwrap().parse().unwrap();
        let mut body = vec![0u8; length];
        std::io::Read::read_exact(&mut connection.0, &mut body).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// A WebDriver command by its name, on `element` if given: its `value`.
    fn op(&self, name: &str, element: Option<&str>, params: Value) -> Value {
        match &self.driver {
            Driver::Chromium {
                base,
                session,
                agent,
                ..
            } => {
                let e = element.unwrap_or_default();
                let (method, path) = match name {
                    "Navigate" => ("POST", "/url".to_owned()),
                    "FindElement" => ("POST", "/element".to_owned()),
                    "FindElements" => ("POST", "/elements".to_owned()),
                    "ElementClick" => ("POST", format!("/element/{e}/click")),
                    "ElementClear" => ("POST", format!("/element/{e}/clear")),
                    "ElementSendKeys" => ("POST", format!("/element/{e}/value")),
                    "GetElementText" => ("GET", format!("/element/{e}/text")),
                    "GetElementAttribute" => (
                        "GET",
                        format!(
                            "/element/{e}/attribute/{}",
                            params["name"].as_str().unwrap()
                        ),
                    ),
                    "ExecuteScript" => ("POST", "/execute/sync".to_owned()),
                    "TakeScreenshot" => ("GET", "/screenshot".to_owned()),
                    other => panic!("a command the test does not map: {other}"),
                };
                let url = format!("{base}/session/{session}{path}");
                http(agent, method, &url, (method == "POST").then_some(params))
            }
            Driver::Firefox { .. } => {
                let mut params = params;
                if let Some(element) = element {
                    params["id"] = element.into();
                }
                let answer = self.marionette(&format!("WebDriver:{name}"), params);
                answer.get("value").cloned().unwrap_or(answer)
            }
        }
    }

    fn goto(&self, url: &str) {
        self.op("Navigate", None, json!({"url": url}));
    }

    fn try_find(&self, css: &str) -> Option<String> {
        let found = self.op(
            "FindElement",
            None,
            json!({"using": "css selector", "value": css}),
        );
        found
            .get(ELEMENT)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    fn find(&self, css: &str) -> String {
        self.wait_for(&format!("element {css}"), || self.try_find(css))
    }

    fn count(&self, css: &str) -> usize {
        let found = self.op(
            "FindElements",
            None,
            json!({"using": "css selector", "value": css}),
        );
        found.as_array().map_or(0, Vec::len)
    }

    fn click(&self, css: &str) {
        let element = self.find(css);
        self.op("ElementClick", Some(&element), json!({}));
    }

    fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css);
        self.op("ElementClear", Some(&element), json!({}));
        self.op("ElementSendKeys", Some(&element), json!({"text": text}));
    }

    fn text(&self, css: &str) -> String {
        let element = self.find(css);
        let text = self.op("GetElementText", Some(&element), json!({}));
        text.as_str().unwrap_or_default().to_owned()
    }

    fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let element = self.try_find(css)?;
        let value = self.op("GetElementAttribute", Some(&element), json!({"name": name}));
        value.as_str().map(str::to_owned)
    }

    fn number(&self, css: &str) -> Option<f64> {
        self.attribute(css, "data-value")?.parse().ok()
    }

    fn run(&self, script: &str) -> Value {
        self.op("ExecuteScript", None, json!({"script": script, "args": []}))
    }

    /// Confirmation dialogs answer yes, and are recorded in `window.confirmed`.
    fn accept_confirmations(&self) {
        self.run("window.confirmed = []; window.confirm = (m) => { window.confirmed.push(m); return true; };");
    }

    fn confirmations(&self) -> usize {
        self.run("return (window.confirmed || []).length;")
            .as_u64()
            .unwrap_or(0) as usize
    }

    fn wait_for<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(found) = f() {
                return found;
            }
            if Instant::now() > deadline {
                self.screenshot("failure");
                let page = self.run("return document.body.innerText;");
                panic!(
                    "timed out waiting for {what}; the page says:\n{}",
                    page.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = self.op(
            "TakeScreenshot",
            None,
            json!({"full": false, "hash": false}),
        );
        let bytes = base64_decode(encoded.as_str().unwrap_or_default());
        let dir = crate::support::workspace().join("target/console-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}-{name}.png", self.name));
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        match &mut self.driver {
            Driver::Chromium {
                driver,
                base,
                session,
                agent,
            } => {
                let _ = agent.delete(format!("{base}/session/{session}")).call();
                let _ = driver.kill();
                let _ = driver.wait();
            }
            Driver::Firefox { browser, .. } => {
                let _ = browser.kill();
                let _ = browser.wait();
            }
        }
    }
}

/// One WebDriver request over HTTP: its `value`.
fn http(agent: &ureq::Agent, method: &str, url: &str, body: Option<Value>) -> Value {
    let answer = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        ("DELETE", _) => agent.delete(url).call(),
        (_, body) => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body.unwrap_or_else(|| json!({})).to_string()),
    }
    .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let text = answer.into_body().read_to_string().unwrap();
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    value.get("value").cloned().unwrap_or(value)
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| *c != b'=' && *c != b'\n').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, c)| n | u32::from(value(*c)) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// Chooses `version` and `percent` in the pipeline page's rollout form and steps the rollout
/// out, its confirmation answered yes.
fn roll_out_from_the_page(browser: &Browser, version: &str, percent: &str) {
    browser.accept_confirmations();
    let option = format!("#rollout-version option[value='{version}']");
    browser.wait_for("the version to choose", || browser.try_find(&option));
    browser.click(&option);
    browser.type_into("#rollout-percent-input", percent);
    browser.click("#rollout-step");
}

fn sign_in(browser: &Browser, url: &str, token: &str) {
    browser.goto(url);
    browser.type_into("#token", token);
    browser.click("#sign-in");
    browser.find("#sign-out");
    browser.accept_confirmations();
}

fn events(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| {
            json!({"user": format!("u{}", i % 7), "ts": crate::server::BASE_TS + i as i64 * 20, "amount": i % 10})
                .to_string()
                + "\n"
        })
        .collect()
}

fn send(server: &Server, body: &str) {
    let (status, answer) =
        server.post("/v1/pipelines/clicks/events", Some(INGEST), body.as_bytes());
    assert_eq!(status, 202, "{answer}");
}

#[test]
fn the_console_shows_what_the_api_says_and_its_buttons_act_in_chromium() {
    the_console_shows_what_the_api_says_and_its_buttons_act(&Browser::chromium());
}

#[test]
fn the_console_shows_what_the_api_says_and_its_buttons_act_in_firefox() {
    the_console_shows_what_the_api_says_and_its_buttons_act(&Browser::firefox());
}

fn the_console_shows_what_the_api_says_and_its_buttons_act(browser: &Browser) {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    let url = server.url("/");

    // Nothing without a token: the page is only a sign-in form; a wrong token is refused.
    browser.goto(&url);
    browser.find("#sign-in-form");
    assert!(browser.try_find("#pipelines").is_none());
    browser.screenshot("sign-in");
    browser.type_into("#token", "not-a-token-at-all");
    browser.click("#sign-in");
    browser.wait_for("the sign-in error", || {
        Some(()).filter(|()| !browser.text("#sign-in-error").is_empty())
    });

    // Create a pipeline from the page.
    sign_in(browser, &url, ADMIN);
    assert!(browser.try_find("#read-only").is_none());
    browser.click("#new-pipeline");
    let spec = json!({"name": "clicks", "source": {"type": "http"},
        "event": {"key": "user", "timestamp": "ts"}, "watermark": {"bound": 0},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "checkpoint_interval": "200ms"});
    browser.type_into("#new-pipeline-spec", &spec.to_string());
    browser.click("#create-pipeline");
    browser.wait_for("the new pipeline running", || {
        Some(()).filter(|()| {
            browser
                .try_find("#pipeline-state")
                .is_some_and(|_| browser.text("#pipeline-state").contains("running"))
        })
    });
    assert_eq!(server.status("clicks")["state"], "running");

    // Events arrive: the charts grow, the result tail and the figures follow the API.
    for round in 0..6 {
        send(&server, &events(round * 200, 200));
        std::thread::sleep(Duration::from_millis(400));
    }
    browser.wait_for("the input chart to grow", || {
        let points: usize = browser
            .attribute("#chart-input-rate polyline", "data-points")?
            .parse()
            .ok()?;
        (points >= 3).then_some(())
    });
    browser.wait_for("results in the live tail", || {
        (browser.count("#results-tail .result") >= 5).then_some(())
    });
    // Every event read first: a snapshot taken while the pipeline still read would be passed
    // by the page, and never matched.
    let status = server.wait_for_events_in("clicks", 1_200);
    let events_in = status["events_in"].as_f64().unwrap();
    browser.wait_for("the page's figures to match the API", || {
        let shown = browser.number("#events-in")?;
        let results = browser.number("#results-out")?;
        let api = server.status("clicks");
        (shown == events_in && results == api["results_out"].as_f64()?).then_some(())
    });
    for chart in [
        "watermark-lag",
        "late-ratio",
        "checkpoint-duration",
        "call-latency",
    ] {
        browser.find(&format!("#chart-{chart}"));
    }
    assert!(
        browser.count("#stage-graph .stage") >= 3,
        "source, aggregate, sink"
    );

    // A dead letter carrying markup is shown as text, never as markup.
    send(&server, "{\"user\": \"<img src=x onerror=alert(1)>\"}\n");
    browser.wait_for("the dead letter", || {
        (browser.count("#dead-letters-table .dead-letter") >= 1).then_some(())
    });
    assert!(browser.text("#dead-letters-table").contains("<img src=x"));
    assert_eq!(browser.count("#dead-letters-table img"), 0);
    browser.screenshot("pipeline");

    // Upload version 2 through the registry page (its file input, as a drop would fill it).
    browser.click("#nav-operators");
    let v2 = std::fs::canonicalize(count_sum_v2()).unwrap();
    let input = browser.find("#upload-file");
    browser.op(
        "ElementSendKeys",
        Some(&input),
        json!({"text": v2.display().to_string()}),
    );
    browser.type_into("#upload-name", "count-sum");
    browser.type_into("#upload-version", "2.0.0");
    browser.click("#upload");
    browser.wait_for("the uploaded version in the table", || {
        browser.try_find("tr[data-operator='count-sum@2.0.0']")
    });
    let (status, body) = server.get("/v1/operators/count-sum/2.0.0", Some(ADMIN));
    assert_eq!(status, 200, "{body}");
    let used_by = "tr[data-operator='count-sum@1.0.0'] td[data-field='used_by']";
    browser.wait_for("version 1 used by the pipeline", || {
        Some(()).filter(|()| browser.text(used_by).contains("clicks"))
    });
    browser.screenshot("operators");

    // Step a rollout to 50 % and roll it back with the page's buttons, each confirmed.
    browser.goto(&format!("{url}#/pipelines/clicks"));
    roll_out_from_the_page(browser, "2.0.0", "50");
    browser.wait_for("the rollout at 50 %", || {
        (browser.number("#rollout-percent")? == 50.0).then_some(())
    });
    let status = server.status("clicks");
    assert_eq!(status["rollout"]["percent"], 50);
    // The candidate is in use (deleting it would be refused), so the status says so.
    assert_eq!(
        status["uses"],
        json!(["count-sum@1.0.0", "count-sum@2.0.0"]),
        "{status}"
    );
    send(&server, &events(1_200, 400));
    browser.wait_for("both versions in the versions table", || {
        browser.try_find("#versions-table tr[data-version='2.0.0']")
    });
    // Version 1 (contract 0.3) served alone before the rollout: its windows were carried.
    let carried =
        browser.number("#versions-table tr[data-version='1.0.0'] td[data-field='carried']");
    assert!(
        carried.is_some_and(|n| n > 0.0),
        "windows carried: {carried:?}"
    );
    browser.screenshot("rollout");
    browser.click("#rollout-back");
    browser.wait_for("the rollback on the page", || {
        browser.try_find("#rolled-back")
    });
    assert!(!server.status("clicks")["rollout"]["rolled_back"].is_null());
    assert_eq!(
        browser.confirmations(),
        2,
        "the step and the rollback asked first"
    );

    // The pipelines list, as the API has it.
    browser.click("#nav-pipelines");
    browser.wait_for("the pipelines table", || {
        browser.try_find("#pipelines tr[data-pipeline='clicks']")
    });
    assert!(
        browser
            .text("tr[data-pipeline='clicks'] td[data-field='state']")
            .contains("running")
    );
    browser.screenshot("pipelines");

    // An ingest token sees the console read-only: no button that changes anything.
    browser.click("#sign-out");
    sign_in(browser, &url, INGEST);
    browser.find("#read-only");
    browser.find("#pipelines tr[data-pipeline='clicks']");
    assert!(browser.try_find("#new-pipeline").is_none());
    browser.goto(&format!("{url}#/pipelines/clicks"));
    browser.find("#rollout-panel");
    for action in [
        "#rollout-step",
        "#rollout-back",
        "#rollout-promote",
        "#stop",
        "#start",
    ] {
        assert!(
            browser.try_find(action).is_none(),
            "{action} for an ingest token"
        );
    }
    browser.goto(&format!("{url}#/operators"));
    browser.find("tr[data-operator='count-sum@1.0.0']");
    assert!(browser.try_find("#upload").is_none());

    // A deploy token changes things but deletes nothing; a token narrowed to a pipeline sees
    // the console read-only (its registry and new pipelines are out of its reach).
    let token = |request: Value| -> String {
        let made = server.expect(
            "a token",
            server.post_json("/v1/tokens", Some(ADMIN), &request),
            201,
        );
        made["token"].as_str().unwrap().to_owned()
    };
    let deploy = token(json!({"name": "ci", "scopes": ["deploy"]}));
    browser.click("#sign-out");
    sign_in(browser, &url, &deploy);
    browser.find("#new-pipeline");
    browser.goto(&format!("{url}#/pipelines/clicks"));
    browser.find("#stop");
    assert!(
        browser.try_find("#delete-pipeline").is_none(),
        "a delete for deploy"
    );
    let narrowed = token(json!({"name": "one", "scopes": ["admin"], "pipelines": ["clicks"]}));
    browser.click("#sign-out");
    sign_in(browser, &url, &narrowed);
    browser.find("#read-only");
    assert!(browser.try_find("#new-pipeline").is_none());
}

#[test]
fn a_hundred_pipelines_list_at_once() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path());
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    for i in 0..100 {
        let spec = json!({"name": format!("p{i:03}"), "source": {"type": "http"},
            "event": {"key": "user", "timestamp": "ts"},
            "window": {"type": "tumbling", "size": 1000},
            "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}]});
        let (status, body) = server.post_json("/v1/pipelines", Some(ADMIN), &spec);
        assert_eq!(status, 201, "{body}");
    }
    let browser = Browser::chromium();
    // Signed in with the keyboard alone: the token typed, then Enter.
    browser.goto(&server.url("/"));
    browser.type_into("#token", &format!("{ADMIN}\u{E007}"));
    let started = Instant::now();
    browser.wait_for("100 rows", || {
        (browser.count("#pipelines tr[data-pipeline]") == 100).then_some(())
    });
    eprintln!("100 pipelines listed {:?} after sign-in", started.elapsed());
}

#[test]
fn the_console_s_api_refuses_what_is_bad_and_lets_readers_change_nothing() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_env(data.path(), &[], &[("WEIR_READ_TOKEN", "read-secret-1")]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    crate::server::create_and_start(&server);
    let letters = "/v1/pipelines/clicks/dead-letters";
    send(&server, "not json\n{\"user\": \"a\"}\n");
    let recent = server.wait_for("both dead letters", crate::server::PATIENCE, || {
        let (status, body) = server.get(letters, Some(ADMIN));
        let rows: Value =
            serde_json::from_str(&body).map_err(|e| format!("{status} {body}: {e}"))?;
        match rows.as_array().map(Vec::len) {
            Some(2) => Ok(rows),
            _ => Err(body),
        }
    });
    assert_eq!(
        recent[1]["reason"], "missing timestamp field `ts`",
        "{recent}"
    );
    let one = server.get(&format!("{letters}?limit=1"), Some(ADMIN));
    assert_eq!(
        serde_json::from_str::<Value>(&one.1).unwrap()[0],
        recent[1],
        "the newest"
    );
    for query in [
        "?limit=0",
        "?limit=101",
        "?limit=-1",
        "?limit=abc",
        "?limit=99999999999999999999",
        "?path=/etc/passwd",
    ] {
        let (status, body) = server.get(&format!("{letters}{query}"), Some(ADMIN));
        assert_eq!(status, 400, "{query}: {body}");
    }
    for path in [
        "/v1/pipelines/..%2F..%2Fetc/dead-letters",
        "/v1/pipelines/nothing-here/spec",
    ] {
        let (status, _) = server.get(path, Some(ADMIN));
        assert!(status == 400 || status == 404, "{path}: {status}");
    }
    let (_, spec) = server.get("/v1/pipelines/clicks/spec", Some("read-secret-1"));
    assert_eq!(
        serde_json::from_str::<Value>(&spec).unwrap(),
        crate::server::spec()
    );
    // Who signed in, and what a reader may not do.
    for (token, scope) in [
        (ADMIN, "admin"),
        (INGEST, "ingest"),
        ("read-secret-1", "read"),
    ] {
        let (status, body) = server.get("/v1/whoami", Some(token));
        let who: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (status, who["scopes"][0].as_str()),
            (200, Some(scope)),
            "{body}"
        );
    }
    for token in [INGEST, "read-secret-1"] {
        let rollout = json!({"version": "1.0.0", "percent": 50});
        let (status, _) = server.post_json("/v1/pipelines/clicks/rollout", Some(token), &rollout);
        assert_eq!(status, 403);
        assert_eq!(
            server.post("/v1/pipelines/clicks/stop", Some(token), b"").0,
            403
        );
        assert_eq!(server.delete("/v1/pipelines/clicks", Some(token)).0, 403);
    }
    assert_eq!(server.status("clicks")["state"], "running");
    // The console's files are the only things served without a token, and nothing else.
    let (status, page) = server.get("/", None);
    assert!(
        status == 200 && page.contains("/console/console.js"),
        "{page}"
    );
    let (status, body) = server.get("/console/..%2Fv1%2Fpipelines", None);
    assert!(status == 404 && !body.contains("clicks"), "{status} {body}");
    assert_eq!(server.get("/console/secret.txt", None).0, 404);
}

#[test]
fn a_nats_fed_pipeline_shows_and_rolls_out_in_the_console() {
    use crate::nats::{Client, NatsServer};
    let nats = NatsServer::start();
    let client = Client::connect(&nats.url);
    client.stream("CLICKS", &["clicks.>"]);
    client.stream("RESULTS", &["results.>"]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(data.path(), &["--nats", &nats.url]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    let spec = json!({"name": "from-nats", "source": {"type": "nats", "stream": "CLICKS"},
        "event": {"key": "user", "timestamp": "ts"}, "watermark": {"bound": 0},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "sinks": {"results": {"nats": "default", "subject": "results.from-nats"}},
        "checkpoint_interval": "200ms"});
    crate::server::create_and_start_spec(&server, &spec);
    let published: Vec<Value> = (0..600)
        .map(|i| json!({"user": format!("u{}", i % 7), "ts": crate::server::BASE_TS + i * 20, "amount": i % 10}))
        .collect();
    client.publish("clicks.web", &published);
    server.wait_for_events_in("from-nats", published.len());

    let browser = Browser::chromium();
    let url = server.url("/");
    sign_in(&browser, &url, ADMIN);
    browser.goto(&format!("{url}#/pipelines/from-nats"));
    browser.wait_for("the stage graph naming the stream and the subject", || {
        let graph = browser.text("#stage-graph");
        (graph.contains("nats CLICKS") && graph.contains("nats results.from-nats")).then_some(())
    });
    browser.wait_for("the page's events in to match the API", || {
        (browser.number("#events-in")? == published.len() as f64).then_some(())
    });
    // A rollout to 50 % from the page's buttons, as for a pipeline fed over HTTP.
    roll_out_from_the_page(&browser, "2.0.0", "50");
    browser.wait_for("the rollout at 50 %", || {
        (browser.number("#rollout-percent")? == 50.0).then_some(())
    });
    server.wait_for_routing("from-nats", "the rollout to apply", |r| r["percent"] == 50);
    let more: Vec<Value> = (600..1_200)
        .map(|i| json!({"user": format!("u{}", i % 7), "ts": crate::server::BASE_TS + i * 20, "amount": i % 10}))
        .collect();
    client.publish("clicks.web", &more);
    browser.wait_for("both versions in the versions table", || {
        browser.try_find("#versions-table tr[data-version='2.0.0']")
    });
    browser.screenshot("nats-pipeline");
}

#[test]
fn a_pipeline_on_workers_shows_its_slices_and_rolls_out_in_the_console() {
    use crate::nats::{Client, NatsServer};
    let nats = NatsServer::start();
    let client = Client::connect(&nats.url);
    client.stream("CLICKS", &["clicks.>"]);
    client.stream("RESULTS", &["results.>"]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(&data.path().join("serve"), &["--nats", &nats.url]);
    server.upload_ok("count-sum", "1.0.0", &count_sum_v1());
    server.upload_ok("count-sum", "2.0.0", &count_sum_v2());
    let spec = json!({"name": "on-workers", "source": {"type": "nats", "stream": "CLICKS"},
        "event": {"key": "user", "timestamp": "ts"}, "watermark": {"bound": 0},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}],
        "sinks": {"results": {"nats": "default", "subject": "results.on-workers"},
                  "late": "discard", "dead_letters": "discard"},
        "checkpoint_interval": "200ms", "workers": {"slices": 4}});
    crate::server::create_and_start_spec(&server, &spec);
    let reaper = crate::support::Reaper::default();
    let mut workers = Vec::new();
    for id in ["w1", "w2", "w3"] {
        let dir = data.path().join(id);
        let worker =
            crate::cluster::spawn_worker(&nats.url, "on-workers", id, &dir, Stdio::null(), &[]);
        workers.push(reaper.track(worker));
    }
    let published: Vec<Value> = (0..600)
        .map(|i| json!({"user": format!("u{}", i % 7), "ts": crate::server::BASE_TS + i * 20, "amount": i % 10}))
        .collect();
    client.publish("clicks.web", &published);

    let browser = Browser::chromium();
    let url = server.url("/");
    sign_in(&browser, &url, ADMIN);
    browser.goto(&format!("{url}#/pipelines/on-workers"));
    browser.wait_for("every slice held by one of the two workers", || {
        let owners: Vec<String> = (0..4)
            .map(|slice| {
                browser.text(&format!(
                    "#workers-table tr[data-slice='{slice}'] td[data-field='owner']"
                ))
            })
            .collect();
        let held: std::collections::BTreeSet<&String> = owners.iter().collect();
        (held.len() == 3
            && owners
                .iter()
                .all(|o| ["w1", "w2", "w3"].contains(&o.as_str())))
        .then_some(())
    });
    assert_eq!(browser.number("#workers-slices"), Some(4.0));
    assert_eq!(browser.number("#workers-members"), Some(3.0));
    // In shadow, then to 50 % of the keys, from the page's buttons, taken up by the workers.
    browser.accept_confirmations();
    let option = "#rollout-version option[value='2.0.0']";
    browser.wait_for("the version to choose", || browser.try_find(option));
    browser.click(option);
    browser.click("#rollout-shadow");
    browser.wait_for("the shadow rollout", || {
        let status = server.status("on-workers");
        (status["workers"]["routing"]["shadow"] == true).then_some(())
    });
    roll_out_from_the_page(&browser, "2.0.0", "50");
    browser.wait_for("the workers applying the rollout at 50 %", || {
        (browser.number("#rollout-applied")? == 50.0).then_some(())
    });
    let status = server.status("on-workers");
    assert_eq!(
        status["workers"]["routing"]["candidate"], "2.0.0",
        "{status}"
    );

    // A savepoint taken from the page lists every slice; a replay of one key from the page
    // shows both versions' windows.
    browser.type_into("#savepoint-name", "from-page");
    browser.click("#savepoint-take");
    browser.wait_for("the savepoint in the list", || {
        let slices = browser
            .text("#savepoints-table tr[data-savepoint='from-page'] td[data-field='slices']");
        (slices == "4").then_some(())
    });
    browser.wait_for("both versions to choose from", || {
        browser.try_find("#replay-b option[value='2.0.0']")
    });
    browser.click("#replay-a option[value='1.0.0']");
    browser.click("#replay-b option[value='2.0.0']");
    browser.type_into("#replay-keys", "u3");
    browser.click("#replay-run");
    browser.wait_for("the replay's windows", || {
        browser.try_find("#replay-table tr[data-key='u3']")
    });
    let answer = server.expect(
        "the same replay over the API",
        server.post_json(
            "/v1/pipelines/on-workers/replay",
            Some(ADMIN),
            &json!({"versions": ["1.0.0", "2.0.0"], "keys": ["u3"]}),
        ),
        200,
    );
    let rows = answer["rows"].as_array().unwrap().len();
    assert_eq!(
        browser.count("#replay-table tr[data-key='u3']"),
        rows,
        "{answer}"
    );
    browser.screenshot("workers-pipeline");

    // Promoted from the page: the workers' routing names 2.0.0 alone.
    browser.wait_for("the promote button", || {
        browser.try_find("#rollout-promote")
    });
    browser.click("#rollout-promote");
    browser.wait_for("2.0.0 live on the workers", || {
        let routing = server.status("on-workers")["workers"]["routing"].clone();
        (routing["live"] == "2.0.0" && routing["candidate"].is_null()).then_some(())
    });
}

#[test]
fn a_gated_rollout_shows_its_steps_and_gates_in_the_console() {
    let mut feeding = crate::gated_rollouts::Feeding::start();
    let server = feeding.server.clone();
    let browser = Browser::chromium();
    let url = server.url("/");
    sign_in(&browser, &url, ADMIN);
    browser.goto(&format!("{url}#/pipelines/clicks"));
    browser.wait_for("the rollout card", || browser.try_find("#rollout-info"));
    let gates = json!({"max_shadow_diff_rate": 0.01, "min_comparisons": 100});
    server.expect(
        "a gated rollout",
        server.post_json(
            "/v1/pipelines/clicks/rollout",
            Some(ADMIN),
            &crate::gated_rollouts::gated(gates),
        ),
        200,
    );
    browser.wait_for("the step in progress with its gate", || {
        browser.try_find("#rollout-timeline li[data-outcome='running']")
    });
    browser.wait_for("the step the shadow gate failed", || {
        browser.try_find("#rollout-timeline li[data-outcome='failed']")
    });
    feeding.stop();
    let timeline = browser.text("#rollout-timeline");
    assert!(timeline.contains("shadow_diff_rate"), "{timeline}");
    assert!(
        browser
            .text("#rolled-back")
            .contains("gate shadow_diff_rate")
    );
    browser.screenshot("gated-rollout");
}

/// The base64 SHA-256 of the public key of the certificate in `cert`, as Chromium's
/// `--ignore-certificate-errors-spki-list` names a key it is to trust.
fn spki_hash(cert: &str) -> String {
    let script = format!(
        "openssl x509 -in {cert} -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -binary | base64"
    );
    let output = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(output.status.success(), "{script}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn the_console_works_over_https_in_chromium() {
    let keys = tempfile::tempdir().unwrap();
    let (ca, cert, key) = crate::served_nats::certificates(keys.path());
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(data.path(), &["--tls-cert", &cert, "--tls-key", &key]);
    let base = server.url("").replacen("http://", "https://", 1);
    // A pipeline made over HTTPS (curl trusting the test authority) for the page to list.
    let curl = |args: &[&str]| {
        let output = Command::new("curl")
            .args(["-sS", "--fail", "--cacert", &ca])
            .args(["-H", &format!("Authorization: Bearer {ADMIN}")])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let component = count_sum_v1().display().to_string();
    curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/wasm",
        "--data-binary",
        &format!("@{component}"),
        &format!("{base}/v1/operators/count-sum/1.0.0"),
    ]);
    let spec = json!({"name": "secure", "source": {"type": "http"},
        "event": {"key": "user", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": 1000},
        "operators": [{"name": "count-sum", "version": "1.0.0", "kind": "aggregate"}]});
    curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data",
        &spec.to_string(),
        &format!("{base}/v1/pipelines"),
    ]);
    // Chromium trusts this certificate's key only, as a browser trusts a deployment's.
    let browser = Browser::chromium_with(&[format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_hash(&cert)
    )]);
    sign_in(&browser, &format!("{base}/"), ADMIN);
    browser.wait_for("the pipeline listed over HTTPS", || {
        (browser.count("#pipelines tr[data-pipeline]") == 1).then_some(())
    });
}
