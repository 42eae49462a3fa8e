//! The escape battery for filtered egress (`allowedDomains`): attack the filtering proxy and the
//! sandbox's network from inside `palisade run`, as root and as an unprivileged user.
//!
//! Everything is on loopback. The test starts its own upstream servers on the host's
//! `127.0.0.2`–`127.0.0.5` (plain HTTP, raw TCP, HTTPS with a throwaway certificate) and gives
//! the proxy names for them with `--proxy-resolve` (never the machine's resolver or
//! `/etc/hosts`). Each upstream logs what reached it, which is the oracle: an attack that the
//! command thinks failed but whose bytes reached a denied upstream is an escape.
//!
//! Each bypass is first shown to work unconfined (the same command as the same user, outside
//! any sandbox, reaches the upstream), then shown to fail inside with nothing arriving.
//!
//! The policy allows `allowed.test`, `*.wild.test`, `loop.test`, `raw.test` and the addresses
//! `127.0.0.2` and `127.0.0.5` (IP-literal entries are how a policy explicitly allows loopback or
//! private addresses; names alone never unlock them). `loop.test` resolves to `127.0.0.1`, which
//! is not allowed, so it must be refused (DNS-rebinding style). `denied.test`,
//! `evilwild.test` and `wild.test` resolve to upstreams too, so a leak would be seen.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/docker_image.rs"]
mod docker_image;
#[path = "support/escape_kit.rs"]
mod escape_kit;
#[path = "support/reachable.rs"]
mod reachable;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use escape_kit::{Env, User};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Upstreams on the host's loopback
// ---------------------------------------------------------------------------------------------

/// A loopback server that logs every connection's bytes. `http` answers one HTTP response
/// carrying its own tag; otherwise it only reads (a raw sink).
struct Upstream {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    fn start(ip: &str, tag: &'static str, http: bool) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&log);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    stream
                        .set_read_timeout(Some(Duration::from_millis(1500)))
                        .unwrap();
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                        if http && got.windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    if http {
                        let body = format!("upstream {tag} ok\n");
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    shared.lock().unwrap().push(got);
                });
            }
        });
        Upstream { addr, log }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections seen so far (waiting briefly for in-flight ones to be logged).
    fn seen(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(200));
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }

    fn clear(&self) {
        self.log.lock().unwrap().clear();
    }
}

/// An HTTPS upstream: Python's http.server behind TLS with a throwaway certificate.
struct TlsUpstream {
    child: Child,
    port: u16,
}

impl TlsUpstream {
    fn start(ip: &str, cert: &Path, key: &Path) -> TlsUpstream {
        let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"upstream tls ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer((sys.argv[1], 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", script, ip])
            .arg(cert)
            .arg(key)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the TLS upstream (python3)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("TLS upstream port");
        TlsUpstream { child, port }
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP listener standing in for a DNS server the sandbox might try to reach.
struct UdpSink {
    socket: UdpSocket,
}

impl UdpSink {
    fn start(ip: &str) -> UdpSink {
        let socket = UdpSocket::bind((ip, 0)).unwrap();
        socket.set_nonblocking(true).unwrap();
        UdpSink { socket }
    }
    fn port(&self) -> u16 {
        self.socket.local_addr().unwrap().port()
    }
    fn received(&self) -> usize {
        std::thread::sleep(Duration::from_millis(200));
        let mut buf = [0u8; 512];
        let mut n = 0;
        while self.socket.recv_from(&mut buf).is_ok() {
            n += 1;
        }
        n
    }
}

// ---------------------------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------------------------

struct Ran {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn summary(&self) -> String {
        format!(
            "status {:?}; stdout {:?}; stderr {:?}",
            self.status,
            tail(&self.stdout),
            tail(&self.stderr)
        )
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(6)..].join(" | ")
}

/// Runs `argv` as `user` with exactly `env`, bounded by [`RUN_TIMEOUT`]. `during` runs while
/// the command is alive (after `wait_for` appears on its stdout, when given).
fn run(
    user: User,
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    during: Option<(&str, &mut dyn FnMut())>,
) -> Ran {
    run_in_groups(user, &[], argv, env, cwd, during)
}

/// [`run`] with supplementary `groups` for uid 65534 (the group of a Docker socket).
fn run_in_groups(
    user: User,
    groups: &[u32],
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    during: Option<(&str, &mut dyn FnMut())>,
) -> Ran {
    let mut full = user.wrap_in_groups(groups);
    full.extend(argv.iter().cloned());
    let mut child = Command::new(&full[0])
        .args(&full[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = Arc::new(Mutex::new(String::new()));
    let out_reader = {
        let out = Arc::clone(&out);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut text = out.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        })
    };
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut during = during;
    let status = loop {
        if let Some((marker, action)) = during.as_mut()
            && out.lock().unwrap().contains(*marker)
        {
            action();
            during = None;
        }
        match child.try_wait().unwrap() {
            Some(status) => break status.code(),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    let stdout = out.lock().unwrap().clone();
    Ran {
        status,
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------------------------------------
// The battery
// ---------------------------------------------------------------------------------------------

/// Everything one user's battery shares.
struct World {
    user: User,
    env: Env,
    ws: PathBuf,
    runtime_dir: PathBuf,
    taskpack: PathBuf,
    audit: PathBuf,
    allowed: Upstream,
    raw: Upstream,
    denied: Upstream,
    wild: Upstream,
    loopback: Upstream,
    tls: TlsUpstream,
    dns: UdpSink,
    results: Vec<(String, bool, String)>,
}

impl World {
    fn new(user: User) -> World {
        let env = Env::new(
            user,
            PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
            escape_kit::palisade_binary(),
        );
        let ws = env.base.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        // The user's home, beside the workspace: a workspace that is the home (or holds it) is
        // no containment, and is refused.
        std::fs::create_dir(env.base.path().join("home")).unwrap();
        let runtime_dir = env.base.path().join("xdg");
        std::fs::create_dir(&runtime_dir).unwrap();
        escape_kit::chmod(&runtime_dir, 0o700);

        // A throwaway certificate for allowed.test, readable in the sandbox (workspace).
        let cert = ws.join("tls.crt");
        let key = ws.join("tls.key");
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=allowed.test"])
            .args(["-addext", "subjectAltName=DNS:allowed.test"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(made.success(), "openssl could not make a test certificate");

        let allowed = Upstream::start("127.0.0.2", "allowed", true);
        let raw = Upstream::start("127.0.0.2", "raw", false);
        let denied = Upstream::start("127.0.0.3", "denied", true);
        let wild = Upstream::start("127.0.0.5", "wild", true);
        let loopback = Upstream::start("127.0.0.1", "loopback", true);
        let tls = TlsUpstream::start("127.0.0.2", &cert, &key);
        let dns = UdpSink::start("127.0.0.4");

        let taskpack = ws.join("taskpack.yaml");
        std::fs::write(
            &taskpack,
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: egress\n\
             spec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    allowedDomains: \
             [allowed.test, \"*.wild.test\", loop.test, raw.test, 127.0.0.2, 127.0.0.5]\n",
        )
        .unwrap();
        escape_kit::chown_tree(env.base.path(), user);
        let audit = env.base.path().join("audit.jsonl");
        World {
            user,
            env,
            ws,
            runtime_dir,
            taskpack,
            audit,
            allowed,
            raw,
            denied,
            wild,
            loopback,
            tls,
            dns,
            results: Vec::new(),
        }
    }

    fn base_env(&self) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            (
                "HOME".into(),
                self.ws.with_file_name("home").display().to_string(),
            ),
            ("LANG".into(), "C.UTF-8".into()),
            (
                "PALISADE_CACHE_DIR".into(),
                self.env.cache.display().to_string(),
            ),
            (
                "XDG_RUNTIME_DIR".into(),
                self.runtime_dir.display().to_string(),
            ),
        ]
    }

    /// `palisade run` of `sh -c script` under the egress policy.
    fn inside(&self, script: &str, during: Option<(&str, &mut dyn FnMut())>) -> Ran {
        let palisade = self.env.palisade.clone().expect("palisade binary");
        let mut argv = vec![palisade.display().to_string(), "run".into()];
        argv.extend(
            [
                "--taskpack",
                &self.taskpack.display().to_string(),
                "--workspace",
                &self.ws.display().to_string(),
                "--audit",
                &self.audit.display().to_string(),
            ]
            .map(String::from),
        );
        for mapping in [
            "allowed.test=127.0.0.2",
            "raw.test=127.0.0.2",
            "denied.test=127.0.0.3",
            "api.wild.test=127.0.0.5",
            "wild.test=127.0.0.5",
            "evilwild.test=127.0.0.5",
            "wild.test.evil.test=127.0.0.5",
            "loop.test=127.0.0.1",
        ] {
            argv.push("--proxy-resolve".into());
            argv.push(mapping.into());
        }
        argv.extend(["--", "/bin/sh", "-c", script].map(String::from));
        run(self.user, &argv, &self.base_env(), &self.ws, during)
    }

    /// The same script unconfined, as the same user.
    fn outside(&self, script: &str) -> Ran {
        let argv = ["/bin/sh", "-c", script].map(String::from);
        run(self.user, &argv, &self.base_env(), &self.ws, None)
    }

    fn record(&mut self, name: &str, ok: bool, detail: String) {
        self.results.push((name.to_owned(), ok, detail));
    }

    fn check(&mut self, name: &str, ok: bool, ran: &Ran) {
        self.record(name, ok, ran.summary());
    }
}

fn battery(user: User) {
    let mut w = World::new(user);
    let ap = w.allowed.port();
    let dp = w.denied.port();
    let wp = w.wild.port();
    let lp = w.loopback.port();
    let rp = w.raw.port();
    let tp = w.tls.port;
    let cert = w.ws.join("tls.crt").display().to_string();

    // --- Controls: the allowed paths work through the proxy. ------------------------------
    let ran = w.inside(
        &format!("curl -sS --max-time 10 http://allowed.test:{ap}/x"),
        None,
    );
    let seen = w.allowed.seen();
    let ok = ran.status == Some(0)
        && ran.stdout.contains("upstream allowed ok")
        && seen.iter().any(|r| {
            r.starts_with("GET /x HTTP/1.1") && r.contains(&format!("Host: allowed.test:{ap}"))
        });
    w.check("control: curl plain HTTP to an allowed name", ok, &ran);
    w.allowed.clear();

    let ran = w.inside(
        &format!("curl -sS --max-time 10 --cacert {cert} https://allowed.test:{tp}/"),
        None,
    );
    w.check(
        "control: curl HTTPS (CONNECT) to an allowed name",
        ran.status == Some(0) && ran.stdout.contains("upstream tls ok"),
        &ran,
    );

    let py = format!(
        "/usr/bin/python3 -c 'import ssl, urllib.request as u\n\
         print(u.urlopen(\"http://allowed.test:{ap}/py\", timeout=10).read().decode().strip())\n\
         c = ssl.create_default_context(cafile=\"{cert}\")\n\
         print(u.urlopen(\"https://allowed.test:{tp}/\", context=c, timeout=10).read().decode().strip())'"
    );
    let ran = w.inside(&py, None);
    w.check(
        "control: Python urllib HTTP and HTTPS to an allowed name",
        ran.status == Some(0)
            && ran.stdout.contains("upstream allowed ok")
            && ran.stdout.contains("upstream tls ok"),
        &ran,
    );
    w.allowed.clear();

    let ran = w.inside(
        &format!("curl -sS --max-time 10 http://api.wild.test:{wp}/"),
        None,
    );
    w.check(
        "control: a name below a `*.` wildcard is allowed",
        ran.status == Some(0) && ran.stdout.contains("upstream wild ok"),
        &ran,
    );
    w.wild.clear();

    // --- Refusals by the proxy. -------------------------------------------------------------
    for (name, url, upstream) in [
        (
            "denied name, plain HTTP (absolute form)",
            format!("http://denied.test:{dp}/"),
            "denied",
        ),
        (
            "wildcard does not match the bare suffix",
            format!("http://wild.test:{wp}/"),
            "wild",
        ),
        (
            "wildcard does not match a look-alike",
            format!("http://evilwild.test:{wp}/"),
            "wild",
        ),
        (
            "wildcard does not match a suffix trick",
            format!("http://wild.test.evil.test:{wp}/"),
            "wild",
        ),
    ] {
        let ran = w.inside(
            &format!("curl -sS --max-time 10 -D - -o /dev/null {url}; echo curl=$?"),
            None,
        );
        let leaked = match upstream {
            "denied" => w.denied.seen(),
            _ => w.wild.seen(),
        };
        let ok = ran.stdout.contains("403")
            && ran
                .stdout
                .contains("X-Palisade-Refusal: domain-not-allowed")
            && leaked.is_empty();
        w.record(
            &format!("refused: {name}"),
            ok,
            format!("{}; upstream saw {leaked:?}", ran.summary()),
        );
    }

    let ran = w.inside(
        &format!("curl -sS --max-time 10 -p https://denied.test:{dp}/; echo curl=$?"),
        None,
    );
    let leaked = w.denied.seen();
    w.record(
        "refused: denied name through CONNECT",
        !ran.stdout.contains("curl=0") && leaked.is_empty(),
        format!("{}; upstream saw {leaked:?}", ran.summary()),
    );

    let ran = w.inside(
        &format!("curl -sS --max-time 10 -D - -o /dev/null http://loop.test:{lp}/; echo curl=$?"),
        None,
    );
    let leaked = w.loopback.seen();
    w.record(
        "refused: allowed name resolving to 127.0.0.1 (not an allowed address)",
        ran.stdout
            .contains("X-Palisade-Refusal: address-not-allowed")
            && leaked.is_empty(),
        format!("{}; upstream saw {leaked:?}", ran.summary()),
    );

    // Absolute form for a denied host with an allowed Host header (domain fronting).
    let script = format!(
        "/usr/bin/python3 -c 'import socket\n\
         s = socket.create_connection((\"127.0.0.1\", 3128), timeout=10)\n\
         s.sendall(b\"GET http://denied.test:{dp}/ HTTP/1.1\\r\\nHost: allowed.test:{ap}\\r\\n\\r\\n\")\n\
         print(s.recv(4096).decode(errors=\"replace\").splitlines()[0])'"
    );
    let ran = w.inside(&script, None);
    let leaked = w.denied.seen();
    let allowed_saw = w.allowed.seen();
    w.record(
        "refused: absolute-form to a denied host with an allowed Host header",
        ran.stdout.contains("403") && leaked.is_empty() && allowed_saw.is_empty(),
        format!(
            "{}; denied saw {leaked:?}; allowed saw {allowed_saw:?}",
            ran.summary()
        ),
    );

    // A second, pipelined request to a denied host after an allowed one.
    let script = format!(
        "/usr/bin/python3 -c 'import socket\n\
         s = socket.create_connection((\"127.0.0.1\", 3128), timeout=10)\n\
         s.sendall(b\"GET http://allowed.test:{ap}/one HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\nGET http://denied.test:{dp}/two HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n\")\n\
         data = b\"\"\n\
         while True:\n  chunk = s.recv(4096)\n  if not chunk: break\n  data += chunk\n\
         print(data.decode(errors=\"replace\"))'"
    );
    let ran = w.inside(&script, None);
    let leaked = w.denied.seen();
    w.allowed.clear();
    w.record(
        "refused: pipelined request to a denied host never reaches it",
        ran.stdout.contains("upstream allowed ok") && leaked.is_empty(),
        format!("{}; denied saw {leaked:?}", ran.summary()),
    );

    // CONNECT to an allowed host, then a CONNECT to a denied host inside the tunnel.
    let script = format!(
        "/usr/bin/python3 -c 'import socket\n\
         s = socket.create_connection((\"127.0.0.1\", 3128), timeout=10)\n\
         s.sendall(b\"CONNECT raw.test:{rp} HTTP/1.1\\r\\nHost: raw.test:{rp}\\r\\n\\r\\n\")\n\
         print(s.recv(4096).decode().splitlines()[0])\n\
         s.sendall(b\"CONNECT denied.test:{dp} HTTP/1.1\\r\\nHost: denied.test:{dp}\\r\\n\\r\\nGET / HTTP/1.1\\r\\n\\r\\n\")\n\
         s.shutdown(socket.SHUT_WR)\n\
         print(\"sent\")'"
    );
    let ran = w.inside(&script, None);
    let leaked = w.denied.seen();
    let raw_saw = w.raw.seen();
    w.record(
        "contained: CONNECT smuggled inside an allowed tunnel goes only to that host",
        ran.stdout.contains("200")
            && leaked.is_empty()
            && raw_saw.iter().any(|r| r.contains("CONNECT denied.test")),
        format!(
            "{}; denied saw {leaked:?}; raw saw {raw_saw:?}",
            ran.summary()
        ),
    );
    w.raw.clear();

    // --- Direct connections that ignore the proxy. ------------------------------------------
    let bypasses = [
        (
            "env -i curl straight to the upstream address",
            format!(
                "env -i /usr/bin/curl -sS --max-time 5 --noproxy '*' http://127.0.0.2:{ap}/direct; echo rc=$?"
            ),
        ),
        (
            "bash /dev/tcp to the upstream address",
            format!(
                "/bin/bash -c 'exec 3<>/dev/tcp/127.0.0.2/{ap} && printf \"GET /devtcp HTTP/1.0\\r\\n\\r\\n\" >&3 && cat <&3'; echo rc=$?"
            ),
        ),
        (
            "raw socket connect from Python",
            format!(
                "/usr/bin/python3 -c 'import socket; s = socket.create_connection((\"127.0.0.2\", {ap}), timeout=5); s.sendall(b\"GET /py HTTP/1.0\\r\\n\\r\\n\"); print(s.recv(100))'; echo rc=$?"
            ),
        ),
    ];
    for (name, script) in bypasses {
        let outside = w.outside(&script);
        let reached_outside = !w.allowed.seen().is_empty();
        w.allowed.clear();
        let ran = w.inside(&script, None);
        let leaked = w.allowed.seen();
        w.allowed.clear();
        w.record(
            &format!("bypass blocked: {name}"),
            reached_outside && leaked.is_empty() && !ran.stdout.contains("upstream allowed ok"),
            format!(
                "outside reached upstream: {reached_outside} ({}); inside: {}; upstream saw {leaked:?}",
                tail(&outside.stdout),
                ran.summary()
            ),
        );
    }

    // DNS: a query to a resolver the test listens as fails inside, and names do not resolve.
    let dns_port = w.dns.port();
    let script = format!(
        "/usr/bin/python3 -c 'import socket\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         u.sendto(b\"\\x12\\x34query\", (\"127.0.0.4\", {dns_port}))\n\
         try:\n  print(\"resolved\", socket.gethostbyname(\"allowed.test\"))\n\
         except OSError as e:\n  print(\"no-dns\", e)'"
    );
    let outside = w.outside(&script);
    let outside_got = w.dns.received();
    let ran = w.inside(&script, None);
    let inside_got = w.dns.received();
    w.record(
        "bypass blocked: DNS query over UDP, and name resolution",
        outside_got > 0 && inside_got == 0 && ran.stdout.contains("no-dns"),
        format!(
            "outside datagrams {outside_got} ({}); inside datagrams {inside_got}; {}",
            tail(&outside.stdout),
            ran.summary()
        ),
    );

    // --- Only the sandbox may use the proxy. --------------------------------------------------
    let runtime_dir = w.runtime_dir.clone();
    let mut answer = String::new();
    let ran = {
        let mut probe = || {
            answer = probe_proxy_socket(&runtime_dir, ap);
        };
        w.inside("echo ready; sleep 3", Some(("ready", &mut probe)))
    };
    let leaked = w.allowed.seen();
    w.record(
        "refused: a host process other than the sandbox connecting to the proxy socket",
        answer.contains("client-not-allowed") && leaked.is_empty(),
        format!("host client got {answer:?}; {}", ran.summary()),
    );

    // --- The audit outcome accounts for every connection. -------------------------------------
    let audit = std::fs::read_to_string(&w.audit).unwrap_or_default();
    let outcomes: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v.get("schemaVersion").and_then(|s| s.as_str()) == Some("palisade.run-outcome/v1")
        })
        .collect();
    let connections: Vec<&serde_json::Value> = outcomes
        .iter()
        .filter_map(|o| o.pointer("/outcome/network/connections"))
        .filter_map(|c| c.as_array())
        .flatten()
        .collect();
    let allowed_ok = connections.iter().any(|c| {
        c["host"] == "allowed.test"
            && c["verdict"] == "allowed"
            && c["bytesDown"].as_u64() > Some(0)
    });
    let refused_ok = connections
        .iter()
        .any(|c| c["host"] == "denied.test" && c["verdict"] == "refused");
    w.record(
        "audit: allowed and refused connections recorded with bytes",
        allowed_ok && refused_ok,
        format!(
            "{} outcomes, {} connections",
            outcomes.len(),
            connections.len()
        ),
    );

    // --- Every refusal of the allowlist is a denial of its run, tied to the rule. -----------
    let denials: Vec<&serde_json::Value> = outcomes
        .iter()
        .filter_map(|o| o.pointer("/outcome/denials/events"))
        .filter_map(|e| e.as_array())
        .flatten()
        .collect();
    let explained = denials.iter().any(|d| {
        d["kind"] == "network"
            && d["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("denied.test:"))
            && d["rule"] == "plan.network.allowlist"
            && d["observedBy"] == "proxy"
    });
    // Allowed connections are never denials.
    let clean = !denials.iter().any(|d| {
        d["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("allowed.test:"))
            && d["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("domain-not-allowed"))
    });
    w.record(
        "audit: each refused name is a denial naming plan.network.allowlist; allowed ones are not",
        explained && clean,
        format!("{} denial events", denials.len()),
    );

    // --- Report. -----------------------------------------------------------------------------
    println!("\negress battery, {}:", user.label());
    let mut failures = Vec::new();
    for (name, ok, detail) in &w.results {
        println!("  {} {name}", if *ok { "ok  " } else { "FAIL" });
        if !ok {
            println!("       {detail}");
            failures.push(name.clone());
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} egress checks failed as {}: {failures:?}",
        failures.len(),
        w.results.len(),
        user.label()
    );
}

/// Connects to the run's proxy socket from the host (not a descendant of the supervisor) and
/// asks for an allowed name; returns the first line of the answer.
fn probe_proxy_socket(runtime_dir: &Path, port: u16) -> String {
    let Ok(users) = std::fs::read_dir(runtime_dir) else {
        return "no runtime dir".into();
    };
    for user_dir in users.flatten() {
        let Ok(runs) = std::fs::read_dir(user_dir.path()) else {
            continue;
        };
        for run in runs.flatten() {
            let socket = run.path().join("proxy.sock");
            if !socket.exists() {
                continue;
            }
            // Through the directory's fd: the full path is longer than `sun_path`.
            let dir = std::fs::File::open(run.path()).unwrap();
            let short = format!(
                "/proc/self/fd/{}/proxy.sock",
                std::os::fd::AsRawFd::as_raw_fd(&dir)
            );
            let Ok(mut stream) = UnixStream::connect(&short) else {
                return format!("cannot connect to {}", socket.display());
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let _ = write!(
                stream,
                "GET http://allowed.test:{port}/intruder HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            return answer;
        }
    }
    "no proxy socket found".into()
}

// ---------------------------------------------------------------------------------------------
// git over ssh through the proxy (SOCKS5, the bridge's `connect` mode as ssh's ProxyCommand)
// ---------------------------------------------------------------------------------------------

/// Debian's sshd on the host's `127.0.0.2` and a free port, with its own configuration, host
/// key and one throwaway user key, all in `dir`; logs in as root (the test runs as root).
struct Sshd {
    child: Child,
    port: u16,
    host_key_line: String,
}

impl Sshd {
    fn start(sshd: &Path, dir: &Path) -> Sshd {
        let keygen = |path: &Path| {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path)
                .stdout(Stdio::null())
                .status()
                .expect("ssh-keygen");
            assert!(made.success(), "ssh-keygen failed");
        };
        keygen(&dir.join("host_key"));
        keygen(&dir.join("user_key"));
        std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
        let port = TcpListener::bind("127.0.0.2:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.2\nHostKey {dir}/host_key\nPidFile {dir}/sshd.pid\n\
                 UsePAM no\nStrictModes no\nAuthorizedKeysFile {dir}/authorized_keys\n\
                 PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\nLogLevel VERBOSE\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        // sshd refuses to start without its privilege-separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("sshd.log")).unwrap())
            .spawn()
            .expect("start sshd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.2", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen on 127.0.0.2:{port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
        let mut fields = host_pub.split_whitespace();
        let host_key_line = format!("{} {}", fields.next().unwrap(), fields.next().unwrap());
        Sshd {
            child,
            port,
            host_key_line,
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where [`git_over_ssh`] runs git.
enum SshSite {
    Bwrap,
    /// A container of the test image with the host's git and ssh, on the daemon of
    /// `image.socket`; `profiles` pins the image and names the static bridge, which runs ssh's
    /// `ProxyCommand` in the container.
    Docker {
        image: docker_image::TestImage,
        profiles: PathBuf,
    },
}

impl SshSite {
    fn backend(&self) -> &'static str {
        match self {
            SshSite::Bwrap => "linux-bwrap",
            SshSite::Docker { .. } => "docker",
        }
    }
}

/// `git clone` and `git push` over ssh inside `palisade run` (filtered network, at `site`)
/// reach the test's sshd by an allowed name with no configuration but the user's own key and
/// known host: the `GIT_SSH_COMMAND` Palisade sets runs ssh through the proxy. The same clone
/// of a name that is not on the list fails, and the refusal is recorded with the name and port.
/// `groups`: uid 65534's supplementary groups (the Docker socket's).
fn git_over_ssh(user: User, site: &SshSite, groups: &[u32]) {
    let Some(sshd) = ["/usr/sbin/sshd", "/sbin/sshd"]
        .map(PathBuf::from)
        .into_iter()
        .find(|p| p.exists())
    else {
        assert!(
            std::env::var_os("PALISADE_REQUIRE_SSHD").is_none(),
            "PALISADE_REQUIRE_SSHD=1 but there is no /usr/sbin/sshd (apt-get install openssh-server)"
        );
        eprintln!("skipped: git over ssh needs Debian's openssh-server (/usr/sbin/sshd)");
        return;
    };
    let env = Env::new(
        user,
        PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
        escape_kit::palisade_binary(),
    );
    let Some(palisade) = env.palisade.clone() else {
        panic!("no palisade binary: {:?}", env.palisade_missing);
    };
    let base = env.base.path();
    let ws = base.join("ws");
    let home = base.join("home");
    let server = base.join("server");
    for dir in [&ws, &home, &server] {
        std::fs::create_dir(dir).unwrap();
    }
    let runtime_dir = base.join("xdg");
    std::fs::create_dir(&runtime_dir).unwrap();
    escape_kit::chmod(&runtime_dir, 0o700);
    let sshd = Sshd::start(&sshd, &server);
    let port = sshd.port;

    // The served repository, with one commit, and the user's key and known host in the
    // workspace (ssh reads neither from anywhere Palisade would have to set up).
    let bare = server.join("repo.git");
    let git = |args: &[&str], cwd: &Path| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "--bare", bare.to_str().unwrap()], &server);
    let seed = server.join("seed");
    git(&["init", "-q", seed.to_str().unwrap()], &server);
    std::fs::write(seed.join("README"), "seeded\n").unwrap();
    git(&["add", "README"], &seed);
    git(&["commit", "-q", "-m", "seed"], &seed);
    git(
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
        &seed,
    );
    std::fs::copy(server.join("user_key"), ws.join("id")).unwrap();
    escape_kit::chmod(&ws.join("id"), 0o600);
    std::fs::write(
        ws.join("known_hosts"),
        format!(
            "[git.test]:{port} {key}\n[other.test]:{port} {key}\n",
            key = sshd.host_key_line
        ),
    )
    .unwrap();
    let taskpack = ws.join("taskpack.yaml");
    std::fs::write(
        &taskpack,
        format!(
            "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: git-ssh\n\
             spec:\n  sandbox:\n    preferredBackends: [{backend}]\n    allowedDomains: \
             [\"git.test:{port}\", \"127.0.0.2:{port}\"]\n",
            backend = site.backend()
        ),
    )
    .unwrap();
    let mut site_args: Vec<String> = Vec::new();
    if let SshSite::Docker { image, profiles } = site {
        site_args.extend([
            "--runtime-profiles".to_owned(),
            profiles.display().to_string(),
            "--docker-socket".to_owned(),
            image.socket.display().to_string(),
        ]);
    }
    // The user's directories are the user's; sshd logs in as root whoever the client is, so
    // the served repository stays root's (git refuses a repository owned by someone else).
    let logs = base.join("logs");
    std::fs::create_dir(&logs).unwrap();
    for dir in [&ws, &home, &runtime_dir, &logs] {
        escape_kit::chown_tree(dir, user);
    }
    let audit = logs.join("audit.jsonl");

    let inside = |name: &str| {
        // The user's own ssh options on top of Palisade's command: key and known hosts.
        let script = format!(
            "set -e\n\
             export GIT_SSH_COMMAND=\"$GIT_SSH_COMMAND -i $PWD/id -o UserKnownHostsFile=$PWD/known_hosts \
             -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o BatchMode=yes\"\n\
             echo \"ssh command: $GIT_SSH_COMMAND\"\n\
             rm -rf clone\n\
             git clone -q ssh://root@{name}:{port}{bare} clone\n\
             cat clone/README\n\
             cd clone\n\
             echo pushed > PUSHED\n\
             git add PUSHED\n\
             git -c user.name=t -c user.email=t@t commit -q -m push\n\
             git push -q origin HEAD:refs/heads/pushed\n\
             echo CLONED-AND-PUSHED\n",
            bare = bare.display()
        );
        let mut argv = vec![palisade.display().to_string(), "run".into()];
        argv.extend(
            [
                "--taskpack",
                &taskpack.display().to_string(),
                "--workspace",
                &ws.display().to_string(),
                "--audit",
                &audit.display().to_string(),
                "--proxy-resolve",
                "git.test=127.0.0.2",
                "--proxy-resolve",
                "other.test=127.0.0.2",
            ]
            .map(String::from),
        );
        argv.extend(site_args.iter().cloned());
        argv.extend(["--", "/bin/sh", "-c", &script].map(String::from));
        let run_env = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), home.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
            ("PALISADE_CACHE_DIR".into(), env.cache.display().to_string()),
            ("XDG_RUNTIME_DIR".into(), runtime_dir.display().to_string()),
        ];
        run_in_groups(user, groups, &argv, &run_env, &ws, None)
    };

    let allowed = inside("git.test");
    let sshd_log = || std::fs::read_to_string(server.join("sshd.log")).unwrap_or_default();
    assert_eq!(
        allowed.status,
        Some(0),
        "{}\nsshd: {}",
        allowed.summary(),
        tail(&sshd_log())
    );
    assert!(
        allowed.stdout.contains("seeded\n") && allowed.stdout.contains("CLONED-AND-PUSHED"),
        "{}",
        allowed.summary()
    );
    assert!(
        allowed
            .stdout
            .contains("ProxyCommand='/run/palisade-bridge/palisade __bridge connect"),
        "{}",
        allowed.summary()
    );
    let pushed = Command::new("git")
        .args(["--git-dir", bare.to_str().unwrap(), "show", "pushed:PUSHED"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&pushed.stdout), "pushed\n");

    let denied = inside("other.test");
    assert_ne!(denied.status, Some(0), "{}", denied.summary());
    assert!(
        denied.stderr.contains("connection not allowed by ruleset"),
        "{}",
        denied.summary()
    );

    let text = std::fs::read_to_string(&audit).unwrap();
    let outcomes: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v.pointer("/outcome").is_some())
        .collect();
    assert_eq!(outcomes.len(), 2, "{text}");
    let connections = |o: &serde_json::Value| {
        o.pointer("/outcome/network/connections")
            .and_then(|c| c.as_array())
            .cloned()
            .unwrap_or_default()
    };
    // Clone and push: two ssh connections, both SOCKS5 by name, allowed, to the listed address.
    let ok = connections(&outcomes[0]);
    assert!(ok.len() >= 2, "{ok:?}");
    for c in &ok {
        assert_eq!(c["method"], "SOCKS5 CONNECT", "{c}");
        assert_eq!(c["host"], "git.test", "{c}");
        assert_eq!(c["port"], port, "{c}");
        assert_eq!(c["verdict"], "allowed", "{c}");
        assert_eq!(c["address"], "127.0.0.2", "{c}");
    }
    let refused = connections(&outcomes[1]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["host"], "other.test");
    assert_eq!(refused[0]["verdict"], "refused");
    assert_eq!(refused[0]["code"], "domain-not-allowed");
    let events = outcomes[1]
        .pointer("/outcome/denials/events")
        .and_then(|e| e.as_array())
        .cloned()
        .unwrap_or_default();
    let target = format!("other.test:{port}");
    assert!(
        events.iter().any(|e| e["target"] == target.as_str()
            && e["rule"] == "plan.network.allowlist"
            && e["operation"] == "SOCKS5 CONNECT"),
        "{events:?}"
    );
    if let SshSite::Docker { image, .. } = site {
        let left: Vec<String> = image
            .containers()
            .into_iter()
            .filter(|name| name.starts_with("palisade-"))
            .collect();
        assert!(left.is_empty(), "containers left: {left:?}");
    }
    eprintln!(
        "git over ssh checked under {} as {}",
        site.backend(),
        user.label()
    );
}

#[test]
fn git_over_ssh_as_root() {
    match escape_kit::root_user() {
        Some(user) => git_over_ssh(user, &SshSite::Bwrap, &[]),
        None => eprintln!("skipped: git over ssh runs its own sshd, which needs root"),
    }
}

#[test]
fn git_over_ssh_unprivileged() {
    match escape_kit::root_user() {
        Some(_) => git_over_ssh(escape_kit::unprivileged_user(), &SshSite::Bwrap, &[]),
        None => eprintln!("skipped: git over ssh runs its own sshd, which needs root"),
    }
}

/// The same clone and push under docker: the host's git and ssh in the test image, ssh's
/// `ProxyCommand` run by the static bridge in the container. As root, and as uid 65534 in the
/// socket's group (how most people use Docker) where the socket has such a group.
#[test]
fn git_over_ssh_under_docker() {
    if escape_kit::root_user().is_none() {
        eprintln!("skipped: git over ssh runs its own sshd, which needs root");
        return;
    }
    let image = match docker_image::ensure_with_git_and_ssh() {
        Ok(image) => image,
        Err(why) => {
            assert!(
                !docker_image::required(),
                "PALISADE_REQUIRE_DOCKER=1 but: {why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
    };
    let bridge = docker_image::static_bridge().unwrap();
    let dir = tempfile::tempdir_in(reachable::reachable_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "egress-docker",
    ))
    .unwrap();
    let profiles = dir.path().join("profiles.yaml");
    image.write_profile_with_bridge(&profiles, &[], Some(&bridge));
    escape_kit::chmod(dir.path(), 0o755);
    escape_kit::chmod(&profiles, 0o644);
    let socket_gid = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&image.socket).unwrap().gid()
    };
    let site = SshSite::Docker { image, profiles };
    git_over_ssh(User::Root, &site, &[]);
    if socket_gid == 0 {
        eprintln!("the socket belongs to root's group: no unprivileged docker user to try");
        return;
    }
    git_over_ssh(escape_kit::unprivileged_user(), &site, &[socket_gid]);
}

#[test]
fn egress_battery_as_root() {
    match escape_kit::root_user() {
        Some(user) => battery(user),
        None => println!("egress battery as root: SKIPPED — the test does not run as root"),
    }
}

#[test]
fn egress_battery_unprivileged() {
    battery(escape_kit::unprivileged_user());
}

// ---------------------------------------------------------------------------------------------
// Approvals at run time (`--approve-with`)
// ---------------------------------------------------------------------------------------------

/// The names the approver is asked about, each resolving (`--proxy-resolve`) to the test's
/// upstream on `127.0.0.3`, and what the approver answers for each.
const ASKED: [&str; 4] = ["once.test", "run.test", "deny.test", "hang.test"];

/// `palisade run --approve-with` under bwrap: a name outside the allowlist is held while the
/// approver answers. `once` lets that one connection through (the next one is asked again),
/// `run` lets every later connection to the name through without asking, `deny` and an approver
/// that hangs past the timeout refuse it (the hung approver's whole group is killed). Every
/// answer is in the outcome and the denials; nothing of a refused name reaches the upstream.
/// The control: the same run without an approver refuses every name at once, as before; and
/// `--approve-with` without filtered egress is refused before anything runs.
fn approvals_at_run_time(user: User) {
    let env = Env::new(
        user,
        PathBuf::from(env!("CARGO_BIN_EXE_palisade-attack")),
        escape_kit::palisade_binary(),
    );
    let Some(palisade) = env.palisade.clone() else {
        panic!("no palisade binary: {:?}", env.palisade_missing);
    };
    let upstream = Upstream::start("127.0.0.3", "approvable", true);
    let port = upstream.port();
    let base = env.base.path();
    let ws = base.join("ws");
    let logs = base.join("logs");
    let home = base.join("home");
    for dir in [&ws, &logs, &home] {
        std::fs::create_dir(dir).unwrap();
    }
    // The names are not listed; the upstream's address is, as an IP-literal entry, so that an
    // approved name passes the proxy's loopback guard (approvals never relax it).
    let taskpack = ws.join("taskpack.yaml");
    std::fs::write(
        &taskpack,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: approvals\n\
         spec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    allowedDomains: [\"127.0.0.3\"]\n",
    )
    .unwrap();
    let no_network = ws.join("none.yaml");
    std::fs::write(
        &no_network,
        "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: approvals\n\
         spec:\n  sandbox:\n    preferredBackends: [linux-bwrap]\n    networkMode: none\n",
    )
    .unwrap();
    let asked_log = logs.join("asked.log");
    let hang_pid = logs.join("hang.pid");
    let approver = base.join("approver.sh");
    std::fs::write(
        &approver,
        format!(
            "#!/bin/sh\nread -r request\nprintf '%s\\n' \"$request\" >> '{asked}'\n\
             case \"$request\" in\n\
             *'\"host\":\"once.test\"'*) echo once ;;\n\
             *'\"host\":\"run.test\"'*) echo run ;;\n\
             *'\"host\":\"hang.test\"'*) sleep 60 & echo $! > '{hang}'; wait ;;\n\
             *) echo deny ;;\n\
             esac\n",
            asked = asked_log.display(),
            hang = hang_pid.display()
        ),
    )
    .unwrap();
    escape_kit::chmod(&approver, 0o755);
    for dir in [&ws, &logs, &home] {
        escape_kit::chown_tree(dir, user);
    }
    let audit = logs.join("audit.jsonl");
    // Each name twice, in order; curl takes its proxy from the variables Palisade sets.
    let script = format!(
        "for h in once once run run deny hang; do \
         curl -s -o /dev/null -w \"$h %{{http_code}}\\n\" http://$h.test:{port}/; done"
    );
    let filtered = taskpack.clone();
    let palisade_run = |approve: Option<(&Path, &str)>, taskpack: &Path| {
        let mut argv = vec![palisade.display().to_string(), "run".into()];
        for (flag, value) in [
            ("--taskpack", taskpack.display().to_string()),
            ("--workspace", ws.display().to_string()),
            ("--audit", audit.display().to_string()),
        ] {
            argv.extend([flag.to_owned(), value]);
        }
        // (`--proxy-resolve` needs filtered egress as much as `--approve-with` does.)
        if taskpack == filtered.as_path() {
            for name in ASKED {
                argv.extend(["--proxy-resolve".to_owned(), format!("{name}=127.0.0.3")]);
            }
        }
        if let Some((command, timeout)) = approve {
            argv.extend([
                "--approve-with".to_owned(),
                command.display().to_string(),
                "--approve-timeout".to_owned(),
                timeout.to_owned(),
            ]);
        }
        argv.extend(["--", "/bin/sh", "-c", &script].map(String::from));
        let run_env = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), home.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
            ("PALISADE_CACHE_DIR".into(), env.cache.display().to_string()),
        ];
        run(user, &argv, &run_env, &ws, None)
    };
    let outcomes = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.pointer("/outcome").is_some())
            .collect()
    };
    let seen_hosts = || -> Vec<String> {
        upstream
            .seen()
            .iter()
            .filter_map(|request| {
                request
                    .lines()
                    .find_map(|l| l.strip_prefix("Host: ").map(str::to_owned))
            })
            .collect()
    };

    // Control: without an approver every name off the list is refused at once.
    let plain = palisade_run(None, &taskpack);
    assert_eq!(plain.status, Some(0), "{}", plain.summary());
    assert_eq!(
        plain.stdout,
        "once 403\nonce 403\nrun 403\nrun 403\ndeny 403\nhang 403\n",
        "{}",
        plain.summary()
    );
    assert!(seen_hosts().is_empty(), "{:?}", seen_hosts());
    let first = outcomes();
    assert_eq!(first.len(), 1);
    assert!(first[0].pointer("/outcome/network/approvals").is_none());
    assert!(first[0].pointer("/outcome/network/approver").is_none());
    assert!(!asked_log.exists());

    // With the approver.
    let approved = palisade_run(Some((&approver, "1500ms")), &taskpack);
    assert_eq!(approved.status, Some(0), "{}", approved.summary());
    let expected = "once 200\nonce 200\nrun 200\nrun 200\ndeny 403\nhang 403\n";
    assert_eq!(approved.stdout, expected, "{}", approved.summary());
    let mut hosts = seen_hosts();
    hosts.sort();
    assert_eq!(
        hosts,
        [
            format!("once.test:{port}"),
            format!("once.test:{port}"),
            format!("run.test:{port}"),
            format!("run.test:{port}"),
        ],
        "only approved connections reach the upstream"
    );
    // Asked five times: `once` twice, `run` once (the second connection rides on it), `deny`,
    // and the hung approver.
    let asked = std::fs::read_to_string(&asked_log).unwrap();
    let requests: Vec<serde_json::Value> = asked
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = requests
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "once.test",
            "once.test",
            "run.test",
            "deny.test",
            "hang.test"
        ]
    );
    for request in &requests {
        assert_eq!(request["port"], port);
        assert_eq!(request["method"], "GET");
        assert_eq!(request["command"][0], "/bin/sh");
        assert!(request["runId"].as_str().is_some_and(|id| !id.is_empty()));
    }
    // The hung approver was killed with its group: its sleep does not run on.
    let pid: i32 = std::fs::read_to_string(&hang_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|s| s != "Z" && s != "X");
    assert!(!running, "the hung approver's sleep still runs: {state}");

    let all = outcomes();
    assert_eq!(all.len(), 2);
    let outcome = &all[1]["outcome"];
    assert_eq!(
        outcome["network"]["approver"],
        approver.display().to_string()
    );
    let approvals = outcome["network"]["approvals"].as_array().unwrap();
    let summary: Vec<(String, String, bool)> = approvals
        .iter()
        .map(|a| {
            assert_eq!(a["port"], port, "{a}");
            (
                a["host"].as_str().unwrap().to_owned(),
                a["answer"].as_str().unwrap().to_owned(),
                a["asked"].as_bool().unwrap(),
            )
        })
        .collect();
    let row = |h: &str, a: &str, asked: bool| (h.to_owned(), a.to_owned(), asked);
    assert_eq!(
        summary,
        [
            row("once.test", "once", true),
            row("once.test", "once", true),
            row("run.test", "run", true),
            row("run.test", "run", false),
            row("deny.test", "deny", true),
            row("hang.test", "deny", true),
        ]
    );
    let hang = &approvals[5];
    assert!(
        hang["detail"]
            .as_str()
            .unwrap()
            .contains("no answer within 1500 ms"),
        "{hang}"
    );
    assert!(hang["waitedMs"].as_u64().unwrap() >= 1500, "{hang}");
    // The denies are refusals like any other, with the approver's reason.
    let events = outcome["denials"]["events"].as_array().unwrap();
    for (name, reason) in [
        ("deny.test", "answered deny"),
        ("hang.test", "no answer within"),
    ] {
        let target = format!("{name}:{port}");
        assert!(
            events.iter().any(|e| e["target"] == target.as_str()
                && e["rule"] == "plan.network.allowlist"
                && e["reason"].as_str().unwrap().contains(reason)),
            "{target}: {events:?}"
        );
    }
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        approved
            .stderr
            .contains(&format!("the approver allowed once.test:{port} once"))
            && approved.stderr.contains(&format!(
                "the approver allowed run.test:{port} for the rest of the run"
            ))
            && approved
                .stderr
                .contains("1 more connection went through on an earlier `run` answer"),
        "{}",
        approved.summary()
    );

    // No proxy, no approvals: refused before anything runs.
    let refused = palisade_run(Some((&approver, "1s")), &no_network);
    assert_eq!(refused.status, Some(125), "{}", refused.summary());
    assert!(
        refused.stderr.contains("PALISADE_INPUT_INVALID")
            && refused.stderr.contains("--approve-with"),
        "{}",
        refused.summary()
    );
    // Its decision still gets an outcome: not launched, and why.
    let all = outcomes();
    assert_eq!(all.len(), 3);
    let last = &all[2]["outcome"];
    assert_eq!(last["endedBy"], "not-launched", "{last}");
    assert_eq!(last["exitCode"], 125, "{last}");
    assert!(
        last["error"].as_str().unwrap().contains("--approve-with"),
        "{last}"
    );
}

#[test]
fn approvals_at_run_time_as_root() {
    match escape_kit::root_user() {
        Some(user) => approvals_at_run_time(user),
        None => approvals_at_run_time(escape_kit::unprivileged_user()),
    }
}

#[test]
fn approvals_at_run_time_unprivileged() {
    match escape_kit::root_user() {
        Some(_) => approvals_at_run_time(escape_kit::unprivileged_user()),
        None => eprintln!("skipped: the unprivileged pass needs root to become uid 65534"),
    }
}

/// `explain --suggest` for a refused name (#39): a run whose allowlist, formed by flags, does not
/// name `refused.test` gets 403 from the proxy; the suggestion is `--allow-domain refused.test`;
/// the same command with it added reaches the test's upstream (200). (The upstream's address is
/// listed as an IP-literal entry, so that the allowed name passes the proxy's loopback guard.)
#[test]
fn applying_explain_suggest_allows_a_refused_name() {
    let palisade = escape_kit::palisade_binary().unwrap();
    let upstream = Upstream::start("127.0.0.3", "suggested", true);
    let port = upstream.port();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let run = |audit: &str, extra: &[String]| {
        let mut command = Command::new(&palisade);
        command
            .args([
                "run",
                "--backend",
                "linux-bwrap",
                "--allow-domain",
                "127.0.0.3",
            ])
            .args(["--proxy-resolve", "refused.test=127.0.0.3", "--audit"])
            .arg(dir.path().join(audit))
            .args(extra)
            .args(["--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://refused.test:{port}/"))
            .current_dir(&ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", dir.path())
            .env("PALISADE_CACHE_DIR", dir.path().join("cache"));
        command.output().unwrap()
    };
    let first = run("first.jsonl", &[]);
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        "403",
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let suggested = Command::new(&palisade)
        .args(["explain", "--suggest"])
        .arg(dir.path().join("first.jsonl"))
        .output()
        .unwrap();
    let suggestion = String::from_utf8_lossy(&suggested.stdout).into_owned();
    let add: Vec<String> = suggestion
        .lines()
        .find_map(|l| l.strip_prefix("add flags: "))
        .map(|rest| rest.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    assert_eq!(add, ["--allow-domain", "refused.test"], "{suggestion}");
    upstream.clear();
    let second = run("second.jsonl", &add);
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        "200",
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        upstream
            .seen()
            .iter()
            .any(|request| request.contains("Host: refused.test")),
        "{:?}",
        upstream.seen()
    );
}
