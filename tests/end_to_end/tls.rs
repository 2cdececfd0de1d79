//! `weir serve` over HTTPS (`--tls-cert`, `--tls-key`), with real clients: curl and `weir
//! savepoint --server https://...` trusting the test authority get answers, beside connections
//! that never start their handshake; a client that does not trust it, and one speaking plain HTTP,
//! get none; a renewed certificate from another authority is taken at SIGHUP without a restart;
//! a SIGHUP with unreadable files keeps the one in use; files that are not a certificate and key
//! stop the server at start with the reason. (Part of issue 45.)

use std::process::{Command, Stdio};

use crate::served_nats::certificates;
use crate::server::{ADMIN, Server};

/// curl's answer (status code) for `path` at `address` over HTTPS trusting `ca` (or nothing:
/// the system's authorities); `None` if the request failed (no TLS session).
fn curl(address: &str, path: &str, ca: Option<&str>) -> Option<u16> {
    curl_url(&format!("https://{address}{path}"), ca)
}

/// curl's answer (status code) for `url`, trusting `ca` if given; `None` if the request failed.
fn curl_url(url: &str, ca: Option<&str>) -> Option<u16> {
    let mut command = Command::new("curl");
    command.args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ]);
    command.args(["-H", &format!("Authorization: Bearer {ADMIN}")]);
    if let Some(ca) = ca {
        command.args(["--cacert", ca]);
    }
    let output = (command.arg(url).stderr(Stdio::null()).output()).expect("curl is installed");
    let code = String::from_utf8_lossy(&output.stdout).parse().ok()?;
    (output.status.success() && code != 0).then_some(code)
}

#[test]
fn weir_serve_answers_over_https_and_takes_a_renewed_certificate_at_sighup() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(first.path());
    let (renewed_ca, renewed_cert, renewed_key) = certificates(second.path());
    let live = tempfile::tempdir().unwrap();
    let (live_cert, live_key) = (live.path().join("cert.pem"), live.path().join("key.pem"));
    std::fs::copy(&cert, &live_cert).unwrap();
    std::fs::copy(&key, &live_key).unwrap();
    let data = tempfile::tempdir().unwrap();
    let (cert_arg, key_arg) = (
        live_cert.display().to_string(),
        live_key.display().to_string(),
    );
    let server = Server::start_with(
        data.path(),
        &[
            "--tls-cert",
            &cert_arg,
            "--tls-key",
            &key_arg,
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let address = server.url("").trim_start_matches("http://").to_owned();
    // The metrics port speaks HTTPS with the same certificate.
    let said = server.stderr();
    let metrics = (said.split("metrics on https://").nth(1))
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap_or_else(|| panic!("no HTTPS metrics address: {said}"))
        .to_owned();
    assert_eq!(curl(&metrics, "/metrics", Some(&ca)), Some(200));

    // Connections that never start their handshake hold up no one else's.
    let silent: Vec<_> = (0..8)
        .map(|_| std::net::TcpStream::connect(&address).unwrap())
        .collect();
    let began = std::time::Instant::now();
    assert_eq!(curl(&address, "/v1/pipelines", Some(&ca)), Some(200));
    assert!(began.elapsed() < std::time::Duration::from_secs(5));
    drop(silent);
    // Weir's own client over HTTPS, trusting the authorities SSL_CERT_FILE names.
    let cli = |trusted: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["savepoint", "list", "nowhere", "--server"])
            .arg(format!("https://{address}"))
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .env("SSL_CERT_FILE", trusted)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let said = cli(&ca);
    assert!(said.contains("404"), "the CLI over HTTPS: {said}");
    let said = cli(&renewed_ca);
    assert!(
        !said.contains("404"),
        "the CLI trusted an unknown authority: {said}"
    );
    assert_eq!(curl(&address, "/healthz", Some(&ca)), Some(200));
    assert_eq!(
        curl(&address, "/healthz", None),
        None,
        "a client that does not trust the authority got an answer"
    );
    assert_eq!(
        curl(&address, "/healthz", Some(&renewed_ca)),
        None,
        "a client trusting another authority got an answer"
    );
    assert_ne!(
        curl_url(&format!("http://{address}/healthz"), None),
        Some(200),
        "plain HTTP was answered on the HTTPS port"
    );

    // A SIGHUP with a key that is not one keeps the certificate in use.
    std::fs::write(&live_key, "not a key").unwrap();
    hangup(&server);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(curl(&address, "/healthz", Some(&ca)), Some(200));

    // Renewed (by another authority), taken at the SIGHUP: new connections present it.
    std::fs::copy(&renewed_cert, &live_cert).unwrap();
    std::fs::copy(&renewed_key, &live_key).unwrap();
    hangup(&server);
    server.wait_for(
        "the renewed certificate",
        crate::server::PATIENCE,
        || match curl(&address, "/healthz", Some(&renewed_ca)) {
            Some(200) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(curl(&address, "/healthz", Some(&ca)), None);
}

#[test]
fn files_that_are_not_a_certificate_and_key_stop_weir_serve_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, key) = certificates(dir.path());
    let data = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not PEM").unwrap();
    let bad = bad.display().to_string();
    for (cert, key, says) in [
        (bad.as_str(), key.as_str(), "certificate"),
        (cert.as_str(), bad.as_str(), "key"),
        (key.as_str(), cert.as_str(), "certificate"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data.path())
            .args(["--tls-cert", cert, "--tls-key", key])
            .env("WEIR_ADMIN_TOKEN", ADMIN)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{cert} {key}: {stderr}");
        assert!(stderr.contains(says), "{cert} {key}: {stderr}");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data.path())
        .args(["--tls-cert", &cert])
        .env("WEIR_ADMIN_TOKEN", ADMIN)
        .output()
        .unwrap();
    assert!(!output.status.success(), "--tls-cert without --tls-key");
}

fn hangup(server: &Server) {
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `weir run --metrics-listen ... --tls-cert ... --tls-key ...` serves its metrics over HTTPS
/// (as `weir worker` does, with the same options): a client trusting the authority gets them,
/// one that does not and one speaking plain HTTP get nothing.
#[test]
fn weir_run_serves_its_metrics_over_https() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let spec = crate::live::piped_spec(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            "--metrics-listen",
            "127.0.0.1:0",
            "--tls-cert",
            &cert,
        ])
        .args(["--tls-key", &key])
        .arg(spec)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("metrics on ") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "no metrics address"
        );
    }
    let address = (line.split("metrics on https://").nth(1))
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap_or_else(|| panic!("not HTTPS: {line}"))
        .to_owned();
    assert_eq!(curl(&address, "/metrics", Some(&ca)), Some(200));
    assert_eq!(
        curl(&address, "/metrics", None),
        None,
        "an untrusted certificate"
    );
    assert_eq!(curl_url(&format!("http://{address}/metrics"), None), None);
    // A renewed certificate is served after a SIGHUP, which the run survives.
    let renewed = tempfile::tempdir().unwrap();
    let (renewed_ca, renewed_cert, renewed_key) = certificates(renewed.path());
    std::fs::copy(&renewed_cert, &cert).unwrap();
    std::fs::copy(&renewed_key, &key).unwrap();
    let pid = child.id().to_string();
    Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while curl(&address, "/metrics", Some(&renewed_ca)) != Some(200) {
        let waited = std::time::Instant::now() < deadline;
        assert!(waited, "the renewed certificate is not served");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended at SIGHUP"
    );
    let _ = child.kill();
    let _ = child.wait();
}
