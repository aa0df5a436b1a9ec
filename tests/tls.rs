//! TLS against the real binary with real clients: psql (`sslmode=require`, `verify-full` with a
//! test CA, and verify-full refusing a wrong host name), pgbench over TLS, tokio-postgres over
//! rustls, SCRAM-SHA-256-PLUS (libpq's `channel_binding=require` succeeds only over TLS; a
//! SHA-384 certificate binds with a SHA-384 hash), `hostssl`/`hostnossl` rules, `--tls-mode
//! require`, direct TLS (PostgreSQL 17's `sslnegotiation=direct`: ClientHello first, ALPN
//! `postgresql`) with a raw rustls client, bytes smuggled after SSLRequest, a client stalled
//! mid-handshake (startup timeout), slow TLS readers (backpressure, bounded memory), client
//! certificates (`cert`, `clientcert=`) compared with PostgreSQL, and SIGHUP reloads of the
//! certificate, key and CA.
//!
//! Certificates are made at run time with rcgen. These run on whichever socket path the binary
//! picks (`RINGWIRE_IO=uring|glommio`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::eventually_blocking;
use common::postgres::Postgres;
use common::ringwire::{rss_kib, Ringwire};
use common::wire::{self, read_messages, simple_query};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A test CA and a server certificate for `localhost` it signed, as PEM files in a temp dir.
struct Certs {
    dir: PathBuf,
    ca_der: CertificateDer<'static>,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Certs {
    fn new(tag: &str, alg: &'static rcgen::SignatureAlgorithm) -> Certs {
        let dir = std::env::temp_dir().join(format!("ringwire-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate_for(alg).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Each CA its own name: OpenSSL finds an issuer by name.
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("ringwire test CA {tag}"));
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate_for(alg).unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        Certs {
            dir,
            ca_der: ca.der().clone(),
            ca,
            ca_key,
        }
    }

    /// A client certificate this CA signed, with `common_name` as its subject's CN (none:
    /// no CN at all), written as `<file>.pem` and `<file>.key` (0600, as libpq wants).
    /// Returns libpq's `sslcert=… sslkey=…`.
    fn client(&self, file: &str, common_name: Option<&str>) -> String {
        use std::os::unix::fs::PermissionsExt;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "ringwire tests");
        if let Some(cn) = common_name {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (cert_path, key_path) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        format!(
            "sslcert={} sslkey={}",
            cert_path.display(),
            key_path.display()
        )
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }

    /// ringwire with this certificate and key, and `extra` arguments.
    fn start(&self, extra: &[&str]) -> Ringwire {
        let (cert, key) = (self.path("server.pem"), self.path("server.key"));
        let mut args = vec!["--tls-cert", &cert, "--tls-key", &key];
        args.extend_from_slice(extra);
        Ringwire::start(&args)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// psql with a libpq connection string; (success, stdout, stderr).
fn psql(conninfo: &str, sql: &str) -> (bool, String, String) {
    let out = Command::new("psql")
        .args(["-X", "-A", "-t", "-w", "-d", conninfo, "-c", sql])
        .output()
        .expect("run psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

fn psql_ok(conninfo: &str, sql: &str) -> String {
    let (ok, stdout, stderr) = psql(conninfo, sql);
    assert!(ok, "psql {conninfo:?} failed: {stderr}");
    stdout
}

#[test]
fn psql_require_and_verify_full_with_a_test_ca() {
    let certs = Certs::new("psql", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&[]);
    let port = rw.port;
    let ca = certs.path("ca.pem");
    // \conninfo names the TLS protocol when the session is encrypted.
    let info = psql_ok(
        &format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require"),
        "\\conninfo",
    );
    assert!(info.contains("SSL connection (protocol: TLSv1.3"), "{info}");
    let plain = psql_ok(
        &format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=disable"),
        "\\conninfo",
    );
    assert!(!plain.contains("SSL connection"), "{plain}");
    assert_eq!(
        psql_ok(
            &format!(
                "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert={ca}"
            ),
            "select 40 + 2",
        ),
        "42"
    );
    // The certificate names localhost, not 127.0.0.1: verify-full must refuse.
    let (ok, _, stderr) = psql(
        &format!(
            "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert={ca}"
        ),
        "select 1",
    );
    assert!(!ok);
    assert!(
        stderr.contains("does not match host name \"127.0.0.1\""),
        "{stderr}"
    );
    // A CA that did not sign the certificate: verify-ca fails too.
    let other = Certs::new("psql-other", &rcgen::PKCS_ECDSA_P256_SHA256);
    let (ok, _, stderr) = psql(
        &format!(
            "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-ca sslrootcert={}",
            other.path("ca.pem")
        ),
        "select 1",
    );
    assert!(!ok);
    assert!(stderr.contains("certificate verify failed"), "{stderr}");
}

#[test]
fn scram_sha_256_plus_is_chosen_over_tls_and_only_there() {
    let certs = Certs::new("scram", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&["--auth", "scram-sha-256", "--user", "alice:s3cret"]);
    let port = rw.port;
    let base = format!("host=127.0.0.1 port={port} user=alice dbname=postgres password=s3cret");
    // channel_binding=require makes libpq insist on SCRAM-SHA-256-PLUS.
    assert_eq!(
        psql_ok(
            &format!("{base} sslmode=require channel_binding=require"),
            "select 1"
        ),
        "1"
    );
    let (ok, _, stderr) = psql(
        &format!("{base} sslmode=disable channel_binding=require"),
        "select 1",
    );
    assert!(!ok);
    assert!(
        stderr.contains("channel binding required, but SSL not in use"),
        "{stderr}"
    );
    // Plain SCRAM over TLS (channel_binding=disable sends `n,,`) and without TLS both work.
    for mode in ["sslmode=require channel_binding=disable", "sslmode=disable"] {
        assert_eq!(psql_ok(&format!("{base} {mode}"), "select 2"), "2");
    }
    // A wrong password fails with PLUS as without.
    let (ok, _, stderr) = psql(
        &format!(
            "host=127.0.0.1 port={port} user=alice dbname=postgres password=wrong sslmode=require channel_binding=require"
        ),
        "select 1",
    );
    assert!(!ok);
    assert!(
        stderr.contains("password authentication failed for user \"alice\""),
        "{stderr}"
    );
}

#[test]
fn hostssl_and_hostnossl_rules_tell_tls_from_plaintext() {
    let certs = Certs::new("hba", &rcgen::PKCS_ECDSA_P256_SHA256);
    let hba = certs.dir.join("hba.conf");
    std::fs::write(
        &hba,
        "hostssl all tls_only 127.0.0.1/32 trust\nhostnossl all tls_only all reject\nhostnossl all all all trust\n",
    )
    .unwrap();
    let hba = hba.to_str().unwrap().to_string();
    let rw = certs.start(&["--hba-file", &hba]);
    let port = rw.port;
    let tls_only = |mode: &str| {
        psql(
            &format!("host=127.0.0.1 port={port} user=tls_only dbname=postgres sslmode={mode}"),
            "select 1",
        )
    };
    assert!(tls_only("require").0);
    let (ok, _, stderr) = tls_only("disable");
    assert!(!ok);
    assert!(
        stderr.contains("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"tls_only\", database \"postgres\", no encryption"),
        "{stderr}"
    );
    let anyone = |mode: &str| {
        psql(
            &format!("host=127.0.0.1 port={port} user=anyone dbname=postgres sslmode={mode}"),
            "select 1",
        )
    };
    assert!(anyone("disable").0);
    // Over TLS no rule is left for this user: PostgreSQL's message names the encryption.
    let (ok, _, stderr) = anyone("require");
    assert!(!ok);
    assert!(
        stderr.contains("no pg_hba.conf entry for host \"127.0.0.1\", user \"anyone\", database \"postgres\", SSL encryption"),
        "{stderr}"
    );
}

/// The `postgres` OS user's uid and gid (PostgreSQL reads its key only if it owns it).
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// psql's outcome with the port numbers blanked: "ok" or the error text.
fn outcome(conninfo: &str) -> String {
    let (ok, stdout, stderr) = psql(conninfo, "select 1");
    if ok {
        assert_eq!(stdout, "1");
        return "ok".into();
    }
    stderr
        .split_whitespace()
        .map(|w| {
            if w.trim_end_matches(',').parse::<u16>().is_ok() {
                "PORT"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// PostgreSQL 15 with this certificate and key (and `ssl_ca_file` = the test CA when
/// `client_ca`), `rules` as its pg_hba.conf, after running `setup` (role creation). Returns
/// it and the path of the rules file, for ringwire's `--hba-file`.
async fn postgres_with_tls(
    certs: &Certs,
    rules: &str,
    setup: &[&str],
    client_ca: bool,
) -> (Postgres, String) {
    let (uid, gid) = postgres_ids();
    for f in ["server.pem", "server.key"] {
        std::os::unix::fs::chown(certs.dir.join(f), Some(uid), Some(gid)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        certs.dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let hba = certs.dir.join("hba.conf");
    std::fs::write(&hba, rules).unwrap();
    std::fs::set_permissions(&hba, std::fs::Permissions::from_mode(0o644)).unwrap();

    let pg = Postgres::start();
    let (admin, connection) =
        tokio_postgres::connect(&pg.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut sql = vec![
        format!(
            "alter system set ssl_cert_file = '{}'",
            certs.path("server.pem")
        ),
        format!(
            "alter system set ssl_key_file = '{}'",
            certs.path("server.key")
        ),
        "alter system set ssl = on".to_string(),
    ];
    if client_ca {
        sql.push(format!(
            "alter system set ssl_ca_file = '{}'",
            certs.path("ca.pem")
        ));
    }
    sql.extend(setup.iter().map(|s| s.to_string()));
    for sql in sql {
        admin.batch_execute(&sql).await.unwrap();
    }
    // hba_file needs a restart in PostgreSQL; copy the rules into the file in force instead.
    let path: String = admin
        .query_one("select current_setting('hba_file')", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "copy (select unnest(string_to_array(pg_read_file('{}'), E'\\n'))) to '{path}'",
            hba.display()
        ))
        .await
        .unwrap();
    admin
        .batch_execute("select pg_reload_conf()")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    (pg, hba.to_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_rules_and_channel_binding_match_postgres() {
    let certs = Certs::new("vs-pg", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rules = "hostssl all tls_only 127.0.0.1/32 trust\n\
                 hostnossl all tls_only all reject\n\
                 hostssl all alice 127.0.0.1/32 scram-sha-256\n\
                 hostnossl all alice all scram-sha-256\n\
                 hostnossl all all all trust\n";
    let (pg, hba_arg) = postgres_with_tls(
        &certs,
        rules,
        &[
            "create role tls_only login",
            "create role anyone login",
            "create role alice login password 's3cret'",
        ],
        false,
    )
    .await;
    let rw = certs.start(&["--hba-file", &hba_arg, "--user", "alice:s3cret"]);
    let cases = [
        "user=tls_only sslmode=require",
        "user=tls_only sslmode=disable",
        "user=anyone sslmode=require",
        "user=anyone sslmode=disable",
        "user=alice password=s3cret sslmode=require channel_binding=require",
        "user=alice password=s3cret sslmode=disable channel_binding=require",
        "user=alice password=wrong sslmode=require channel_binding=require",
        "user=alice password=s3cret sslmode=require channel_binding=disable",
        "user=alice password=s3cret sslmode=disable",
    ];
    // The matrix is not trivially equal: 5 connect, 4 fail in 4 different ways.
    same_outcomes_as_postgres(
        (pg.port, rw.port),
        "",
        &cases.map(String::from),
        5,
        &[
            (1, "no encryption"),
            (2, "SSL encryption"),
            (5, "channel binding required, but SSL not in use"),
            (6, "password authentication failed"),
        ],
    );
}

/// psql with each case (after `host=127.0.0.1 port=… dbname=postgres {common}`) against
/// PostgreSQL and ringwire, `ports` in that order: the outcomes must be equal. So that the
/// comparison is not trivially true, `oks` of the cases must connect and case `i`'s outcome
/// must contain its needle.
fn same_outcomes_as_postgres(
    ports: (u16, u16),
    common: &str,
    cases: &[String],
    oks: usize,
    needles: &[(usize, &str)],
) {
    let mut outcomes = Vec::new();
    for case in cases {
        let on = |port: u16| {
            outcome(&format!(
                "host=127.0.0.1 port={port} dbname=postgres {common} {case}"
            ))
        };
        let (want, got) = (on(ports.0), on(ports.1));
        assert_eq!(got, want, "{case}");
        outcomes.push(got);
    }
    assert_eq!(
        outcomes.iter().filter(|o| *o == "ok").count(),
        oks,
        "{outcomes:#?}"
    );
    for &(i, needle) in needles {
        assert!(
            outcomes[i].contains(needle),
            "{}: {}",
            cases[i],
            outcomes[i]
        );
    }
}

/// `cert` and `clientcert=` rules with client certificates from a test CA, against
/// PostgreSQL with the same rules, CA and certificates: every psql outcome must be the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_match_postgres() {
    let certs = Certs::new("clientcert", &rcgen::PKCS_ECDSA_P256_SHA256);
    let alice = certs.client("alice", Some("alice"));
    let bob = certs.client("bob", Some("bob"));
    let carol = certs.client("carol", Some("carol"));
    let nameless = certs.client("nameless", None);
    let rogue_ca = Certs::new("clientcert-rogue", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rogue = rogue_ca.client("rogue", Some("alice"));
    let rules = "hostssl all alice 127.0.0.1/32 cert\n\
                 hostssl all carol 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n\
                 hostssl all dave 127.0.0.1/32 trust clientcert=verify-ca\n\
                 hostssl all erin 127.0.0.1/32 trust clientcert=verify-full\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostnossl all all all trust\n";
    let (pg, hba) = postgres_with_tls(
        &certs,
        rules,
        &[
            "create role alice login",
            "create role carol login password 's3cret'",
            "create role dave login",
            "create role erin login",
            "create role frank login",
        ],
        true,
    )
    .await;
    let ca = certs.path("ca.pem");
    let rw = certs.start(&[
        "--hba-file",
        &hba,
        "--tls-ca",
        &ca,
        "--user",
        "carol:s3cret",
    ]);
    let cases = [
        format!("user=alice {alice}"),
        format!("user=alice {bob}"),
        "user=alice".to_string(),
        format!("user=alice {nameless}"),
        format!("user=carol password=s3cret {carol}"),
        format!("user=carol password=s3cret {alice}"),
        format!("user=carol password=wrong {carol}"),
        "user=carol password=s3cret".to_string(),
        format!("user=dave {bob}"),
        "user=dave".to_string(),
        format!("user=erin {bob}"),
        "user=frank".to_string(),
        format!("user=frank {alice}"),
    ];
    same_outcomes_as_postgres(
        (pg.port, rw.port),
        "sslmode=require",
        &cases,
        5,
        &[
            (1, "certificate authentication failed for user \"alice\""),
            (2, "connection requires a valid client certificate"),
            (3, "certificate authentication failed for user \"alice\""),
            (5, "password authentication failed for user \"carol\""),
            (10, "\"trust\" authentication failed for user \"erin\""),
        ],
    );
    // A certificate from another CA fails the handshake itself, on both servers (OpenSSL and
    // rustls word the alert differently, so only the failure is compared).
    for port in [pg.port, rw.port] {
        let (ok, _, stderr) = psql(
            &format!(
                "host=127.0.0.1 port={port} dbname=postgres sslmode=require user=frank {rogue}"
            ),
            "select 1",
        );
        assert!(
            !ok,
            "port {port}: a certificate from an unknown CA was accepted"
        );
        assert!(
            stderr.contains("SSL") || stderr.contains("certificate"),
            "{stderr}"
        );
    }
    // Without --tls-ca, a rule that needs a certificate cannot be met: PostgreSQL's F0000.
    let no_ca = certs.start(&["--hba-file", &hba, "--user", "carol:s3cret"]);
    let text = outcome(&format!(
        "host=127.0.0.1 port={} dbname=postgres sslmode=require user=alice {alice}",
        no_ca.port
    ));
    assert!(
        text.contains(
            "client certificates can only be checked if a root certificate store is available"
        ),
        "{text}"
    );
}

/// SIGHUP re-reads the certificate, key and client CA: new handshakes use the new ones,
/// connections made before keep working, and files that do not load leave the old ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_reload_on_sighup() {
    let first = Certs::new("reload-a", &rcgen::PKCS_ECDSA_P256_SHA256);
    let second = Certs::new("reload-b", &rcgen::PKCS_ECDSA_P256_SHA256);
    // ringwire reads its files from a directory of its own, which the test rewrites.
    let live = std::env::temp_dir().join(format!("ringwire-tls-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&live);
    std::fs::create_dir_all(&live).unwrap();
    let install = |certs: &Certs| {
        for f in ["server.pem", "server.key", "ca.pem"] {
            std::fs::copy(certs.dir.join(f), live.join(f)).unwrap();
        }
    };
    install(&first);
    std::fs::write(
        live.join("hba"),
        "hostssl all alice all cert\nhost all all all trust\n",
    )
    .unwrap();
    let path = |f: &str| live.join(f).to_str().unwrap().to_string();
    let rw = Ringwire::start(&[
        "--tls-cert",
        &path("server.pem"),
        "--tls-key",
        &path("server.key"),
        "--tls-ca",
        &path("ca.pem"),
        "--hba-file",
        &path("hba"),
    ]);
    let verify = |root: &Certs, extra: &str| {
        outcome(&format!(
            "host=localhost port={} dbname=postgres sslmode=verify-full sslrootcert={} {extra}",
            rw.port,
            root.path("ca.pem")
        ))
    };
    let (alice_a, alice_b) = (
        first.client("alice", Some("alice")),
        second.client("alice", Some("alice")),
    );
    assert_eq!(verify(&first, "user=bob"), "ok");
    assert_eq!(verify(&first, &format!("user=alice {alice_a}")), "ok");
    assert_ne!(verify(&second, "user=bob"), "ok");

    // A connection made now must outlive the reload.
    let tls = pg_rustls::MakeConnect {
        config: Arc::new(client_config(&first.ca_der, &[])),
        hash: pg_rustls::Hash::Sha256,
    };
    let (client, connection) = tokio_postgres::connect(
        &format!(
            "host=localhost port={} user=bob dbname=postgres sslmode=require",
            rw.port
        ),
        tls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);

    install(&second);
    let hup = || {
        let status = Command::new("kill")
            .args(["-HUP", &rw.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    hup();
    eventually_blocking(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        "the new certificate is taken up",
        || verify(&second, "user=bob") == "ok",
    );
    assert_ne!(
        verify(&first, "user=bob"),
        "ok",
        "the old certificate is still served"
    );
    // The client CA changed with it: the old CA's certificates no longer pass.
    assert_eq!(verify(&second, &format!("user=alice {alice_b}")), "ok");
    assert_ne!(verify(&second, &format!("user=alice {alice_a}")), "ok");
    let n: i32 = client.query_one("select 7", &[]).await.unwrap().get(0);
    assert_eq!(n, 7, "the connection made before the reload");

    // A broken key: the reload is refused and the second certificate stays in force.
    std::fs::write(live.join("server.key"), "not a key").unwrap();
    hup();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(verify(&second, "user=bob"), "ok");
    let _ = std::fs::remove_dir_all(&live);
}

#[test]
fn tls_mode_require_refuses_plaintext_with_28000() {
    let certs = Certs::new("require", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&["--tls-mode", "require"]);
    let port = rw.port;
    let base = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let (ok, _, stderr) = psql(&format!("{base} sslmode=disable"), "select 1");
    assert!(!ok);
    assert!(
        stderr.contains("FATAL:  this server accepts TCP connections only over TLS"),
        "{stderr}"
    );
    // sslmode=prefer (libpq's default) tries TLS first and gets in.
    assert_eq!(psql_ok(&format!("{base} sslmode=prefer"), "select 3"), "3");
    // The SQLSTATE, through tokio-postgres.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt
        .block_on(tokio_postgres::connect(
            &format!("{base} sslmode=disable"),
            tokio_postgres::NoTls,
        ))
        .err()
        .expect("plaintext must be refused");
    assert_eq!(
        err.as_db_error().map(|e| e.code().code()),
        Some("28000"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_requests_work_under_require_in_plaintext_and_over_tls() {
    let certs = Certs::new("cancel", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&["--tls-mode", "require"]);
    // tokio-postgres sends its CancelRequest over TLS (SSLRequest, handshake, then the key).
    let tls = pg_rustls::MakeConnect {
        config: Arc::new(client_config(&certs.ca_der, &[])),
        hash: pg_rustls::Hash::Sha256,
    };
    let conn = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=require",
        rw.port
    );
    let (client, connection) = tokio_postgres::connect(&conn, tls.clone()).await.unwrap();
    tokio::spawn(connection);
    let token = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        token.cancel_query(tls).await
    });
    let started = std::time::Instant::now();
    let result = client.simple_query("select pg_sleep(10)").await;
    canceller.await.unwrap().unwrap();
    let err = result.expect_err("the sleep must be cancelled");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let db = err.as_db_error().unwrap_or_else(|| panic!("{err:?}"));
    assert_eq!(
        (db.code().code(), db.message()),
        ("57014", "canceling statement due to user request")
    );
    // libpq before 17 sends CancelRequest in plaintext even for a TLS session (psql on
    // SIGINT); PostgreSQL accepts it, the 32-bit key being the secret, and so must
    // --tls-mode require.
    let started = std::time::Instant::now();
    let child = Command::new("psql")
        .args(["-X", "-A", "-t", "-d"])
        .arg(format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=require",
            rw.port
        ))
        .args(["-c", "select pg_sleep(10)"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    // SAFETY: signalling the child we spawned, by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("canceling statement due to user request"),
        "{stderr}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn bad_tls_settings_are_one_clear_sentence() {
    let certs = Certs::new("bad", &rcgen::PKCS_ECDSA_P256_SHA256);
    let fails = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ringwire"))
            .args(["--listen", "127.0.0.1:0", "--shards", "1"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let cert = certs.path("server.pem");
    let key = certs.path("server.key");
    let ca = certs.path("ca.pem");
    assert!(fails(&["--tls-mode", "require"]).contains("--tls-mode require needs --tls-cert"));
    assert!(fails(&["--tls-cert", &cert]).contains("--tls-cert needs --tls-key"));
    assert!(
        fails(&["--tls-cert", "/nonexistent.pem", "--tls-key", &key])
            .contains("cannot read --tls-cert /nonexistent.pem")
    );
    // The CA's certificate with the server's key: not a pair.
    assert!(fails(&["--tls-cert", &ca, "--tls-key", &key]).contains("do not make a usable pair"));
    assert!(fails(&["--tls-mode", "sometimes"]).contains("unknown TLS mode"));
    assert!(fails(&["--tls-ca", &ca]).contains("--tls-ca needs --tls-cert and --tls-key"));
    // A key is not a CA certificate.
    assert!(
        fails(&["--tls-cert", &cert, "--tls-key", &key, "--tls-ca", &key])
            .contains(&format!("--tls-ca {key} holds no PEM certificate"))
    );
}

#[test]
fn pgbench_over_tls() {
    let certs = Certs::new("pgbench", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&[]);
    let port = rw.port.to_string();
    let run = |args: &[&str]| {
        let out = Command::new("pgbench")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
            .args(args)
            .arg("postgres")
            .env("PGSSLMODE", "require")
            .output()
            .expect("run pgbench");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "pgbench {args:?}: {text}");
        text
    };
    run(&["-i", "-s", "1", "-q"]);
    let report = run(&["-n", "-S", "-c", "4", "-j", "2", "-t", "200"]);
    let (processed, failed) = common::pgbench::processed_and_failed(&report);
    assert_eq!((processed, failed), (800, 0), "{report}");
    // And the TPC-B-like default script, which writes.
    let report = run(&["-n", "-c", "2", "-t", "50"]);
    assert_eq!(
        common::pgbench::processed_and_failed(&report),
        (100, 0),
        "{report}"
    );
}

fn client_config(ca: &CertificateDer<'static>, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// tokio-postgres over tokio-rustls, with the `tls-server-end-point` channel binding computed
/// on the client's side: the hash of the certificate the client received, with the hash the
/// test names (SHA-256, or SHA-384 for a certificate signed with SHA-384). Written here
/// because tokio-postgres-rustls 0.13 returns no binding (it parses the certificate as a
/// TBSCertificate), which would leave SCRAM-SHA-256-PLUS untested.
mod pg_rustls {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use rustls::pki_types::ServerName;
    use sha2::Digest;
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

    #[derive(Clone, Copy)]
    pub enum Hash {
        Sha256,
        Sha384,
    }

    #[derive(Clone)]
    pub struct MakeConnect {
        pub config: Arc<rustls::ClientConfig>,
        pub hash: Hash,
    }

    pub struct Connect {
        make: MakeConnect,
        domain: String,
    }

    pub struct Stream<S> {
        inner: tokio_rustls::client::TlsStream<S>,
        hash: Hash,
    }

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for MakeConnect {
        type Stream = Stream<S>;
        type TlsConnect = Connect;
        type Error = BoxError;

        fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, BoxError> {
            Ok(Connect {
                make: self.clone(),
                domain: domain.to_string(),
            })
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for Connect {
        type Stream = Stream<S>;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<Stream<S>, BoxError>> + Send>>;

        fn connect(self, stream: S) -> Self::Future {
            Box::pin(async move {
                let name = ServerName::try_from(self.domain)?;
                let inner = tokio_rustls::TlsConnector::from(self.make.config)
                    .connect(name, stream)
                    .await?;
                Ok(Stream {
                    inner,
                    hash: self.make.hash,
                })
            })
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
        fn channel_binding(&self) -> ChannelBinding {
            match self.inner.get_ref().1.peer_certificates() {
                Some([leaf, ..]) => ChannelBinding::tls_server_end_point(match self.hash {
                    Hash::Sha256 => sha2::Sha256::digest(leaf).to_vec(),
                    Hash::Sha384 => sha2::Sha384::digest(leaf).to_vec(),
                }),
                _ => ChannelBinding::none(),
            }
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }
}

async fn tokio_postgres_tls(certs: &Certs, port: u16, hash: pg_rustls::Hash) {
    let tls = pg_rustls::MakeConnect {
        config: Arc::new(client_config(&certs.ca_der, &[])),
        hash,
    };
    let conn = format!(
        "host=localhost port={port} user=alice password=s3cret dbname=postgres sslmode=require channel_binding=require"
    );
    let (client, connection) = tokio_postgres::connect(&conn, tls)
        .await
        .unwrap_or_else(|e| panic!("tokio-postgres over TLS: {e:?}"));
    tokio::spawn(connection);
    let rows = client
        .query("select $1::int4 + 1", &[&41i32])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i32>(0), 42);
    // A result bigger than one TLS record (16 KiB) comes back whole.
    let big: String = client
        .query_one("select repeat('x', 100000)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(big.len(), 100_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_over_rustls_with_channel_binding() {
    // P-256 (SHA-256 hash) and P-384 (the binding hash is then SHA-384, as RFC 5929 says).
    for (tag, alg, hash) in [
        (
            "tp256",
            &rcgen::PKCS_ECDSA_P256_SHA256,
            pg_rustls::Hash::Sha256,
        ),
        (
            "tp384",
            &rcgen::PKCS_ECDSA_P384_SHA384,
            pg_rustls::Hash::Sha384,
        ),
    ] {
        let certs = Certs::new(tag, alg);
        let rw = certs.start(&["--auth", "scram-sha-256", "--user", "alice:s3cret"]);
        tokio_postgres_tls(&certs, rw.port, hash).await;
        // The wrong hash is a failed binding check: 28000, as PostgreSQL says it.
        let wrong = match hash {
            pg_rustls::Hash::Sha256 => pg_rustls::Hash::Sha384,
            pg_rustls::Hash::Sha384 => pg_rustls::Hash::Sha256,
        };
        let tls = pg_rustls::MakeConnect {
            config: Arc::new(client_config(&certs.ca_der, &[])),
            hash: wrong,
        };
        let conn = format!(
            "host=localhost port={} user=alice password=s3cret dbname=postgres sslmode=require channel_binding=require",
            rw.port
        );
        let err = tokio_postgres::connect(&conn, tls)
            .await
            .err()
            .expect("wrong binding accepted");
        let db = err.as_db_error().unwrap_or_else(|| panic!("{err:?}"));
        assert_eq!(
            (db.code().code(), db.message()),
            ("28000", "SCRAM channel binding check failed")
        );
    }
}

fn startup_message() -> Vec<u8> {
    wire::startup_message(&[("user", "postgres"), ("database", "postgres")])
}

fn sqlstate(body: &[u8]) -> String {
    wire::error_field(body, b'C')
}

async fn direct_tls(
    certs: &Certs,
    port: u16,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(&certs.ca_der, alpn)));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_with_alpn_postgresql() {
    let certs = Certs::new("direct", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&["--tls-mode", "require"]);
    // ClientHello straight away, ALPN `postgresql`: then a normal startup over TLS.
    let mut tls = direct_tls(&certs, rw.port, &[b"postgresql"]).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"postgresql"[..]));
    tls.write_all(&startup_message()).await.unwrap();
    let messages = read_messages(&mut tls).await;
    assert_eq!(messages.last().map(|m| m.0), Some(b'Z'), "{messages:?}");
    tls.write_all(&simple_query("select 6 * 7")).await.unwrap();
    let messages = read_messages(&mut tls).await;
    let row = messages.iter().find(|m| m.0 == b'D').expect("a DataRow");
    assert!(row.1.ends_with(b"42"), "{row:?}");

    // Without ALPN the handshake completes, then PostgreSQL 17's FATAL 08P01 comes over TLS.
    let mut tls = direct_tls(&certs, rw.port, &[]).await.unwrap();
    let messages = read_messages(&mut tls).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].0, b'E');
    assert_eq!(sqlstate(&messages[0].1), "08P01");
    assert!(String::from_utf8_lossy(&messages[0].1).contains("without ALPN"));

    // Another protocol in ALPN: the handshake itself is refused (no_application_protocol).
    let err = direct_tls(&certs, rw.port, &[b"http/1.1"]).await.err();
    assert!(err.is_some(), "a non-postgresql ALPN was accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gss_request_is_declined_then_ssl_request_gets_tls() {
    // libpq built with GSSAPI asks for GSS encryption first, then for SSL on the same socket.
    let certs = Certs::new("gss", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&[]);
    let mut tcp = TcpStream::connect(("127.0.0.1", rw.port)).await.unwrap();
    let mut answer = [0u8; 1];
    for (code, want) in [(80877104i32, b'N'), (80877103, b'S')] {
        let mut request = 8i32.to_be_bytes().to_vec();
        request.extend_from_slice(&code.to_be_bytes());
        tcp.write_all(&request).await.unwrap();
        tokio::io::AsyncReadExt::read_exact(&mut tcp, &mut answer)
            .await
            .unwrap();
        assert_eq!(answer[0], want, "answer to request code {code}");
    }
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(&certs.ca_der, &[])));
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(&startup_message()).await.unwrap();
    assert_eq!(
        read_messages(&mut tls).await.last().map(|m| m.0),
        Some(b'Z')
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_ssl_request_are_refused_not_read_as_encrypted() {
    // CVE-2021-23214: a man in the middle appends plaintext after SSLRequest, hoping the server
    // buffers it and later treats it as having come over TLS.
    let certs = Certs::new("cve", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&[]);
    let mut tcp = TcpStream::connect(("127.0.0.1", rw.port)).await.unwrap();
    let mut request = 8i32.to_be_bytes().to_vec();
    request.extend_from_slice(&80877103i32.to_be_bytes());
    request.extend_from_slice(&simple_query("select 1"));
    tcp.write_all(&request).await.unwrap();
    let messages = read_messages(&mut tcp).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(sqlstate(&messages[0].1), "08P01");
    assert!(String::from_utf8_lossy(&messages[0].1).contains("unencrypted data after SSL request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_in_the_handshake_is_cut_off() {
    let certs = Certs::new("stall", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&["--startup-timeout-secs", "2"]);
    for direct in [false, true] {
        let mut tcp = TcpStream::connect(("127.0.0.1", rw.port)).await.unwrap();
        let started = std::time::Instant::now();
        if direct {
            // The first bytes of a TLS record header, then nothing.
            tcp.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
        } else {
            let mut request = 8i32.to_be_bytes().to_vec();
            request.extend_from_slice(&80877103i32.to_be_bytes());
            tcp.write_all(&request).await.unwrap();
            let mut answer = [0u8; 1];
            tokio::io::AsyncReadExt::read_exact(&mut tcp, &mut answer)
                .await
                .unwrap();
            assert_eq!(&answer, b"S");
        }
        assert!(wire::is_closed(&mut tcp).await);
        let after = started.elapsed();
        assert!(
            after >= std::time::Duration::from_millis(1800)
                && after < std::time::Duration::from_secs(6),
            "direct={direct}: cut off after {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_tls_readers_get_backpressure_not_buffers() {
    // Clients that pipeline 30 one-megabyte replies over TLS and read none: the server must
    // hold about one reply per client (its output cap and rustls' 64 KiB record buffer), not
    // 30, and must go on serving others; a client that finally reads gets every byte.
    let certs = Certs::new("slow", &rcgen::PKCS_ECDSA_P256_SHA256);
    let rw = certs.start(&["--shards", "1"]);
    const REPLIES: usize = 30;
    const REPLY_BYTES: usize = 1_000_000;
    let sql = format!("select repeat('x', {REPLY_BYTES})");
    let mut stalled = Vec::new();
    let before = rss_kib(rw.pid());
    for _ in 0..4 {
        let mut tls = direct_tls(&certs, rw.port, &[b"postgresql"]).await.unwrap();
        tls.write_all(&startup_message()).await.unwrap();
        assert_eq!(
            read_messages(&mut tls).await.last().map(|m| m.0),
            Some(b'Z')
        );
        let mut batch = Vec::new();
        for _ in 0..REPLIES {
            batch.extend_from_slice(&simple_query(&sql));
        }
        tls.write_all(&batch).await.unwrap();
        stalled.push(tls);
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let grown_mib = rss_kib(rw.pid()).saturating_sub(before) / 1024;
    eprintln!("RSS grew {grown_mib} MiB with 4 stalled TLS readers");
    assert!(
        grown_mib < 60,
        "RSS grew {grown_mib} MiB for 4 TLS clients that do not read (unbounded would be ~120)"
    );
    // A bystander over TLS is served meanwhile.
    let mut bystander = direct_tls(&certs, rw.port, &[b"postgresql"]).await.unwrap();
    bystander.write_all(&startup_message()).await.unwrap();
    read_messages(&mut bystander).await;
    bystander
        .write_all(&simple_query("select 1"))
        .await
        .unwrap();
    let replies = read_messages(&mut bystander).await;
    assert!(replies.iter().any(|m| m.0 == b'D'), "{replies:?}");
    // Every reply arrives whole.
    let mut first = stalled.remove(0);
    for i in 0..REPLIES {
        let replies = read_messages(&mut first).await;
        let row = replies
            .iter()
            .find(|m| m.0 == b'D')
            .unwrap_or_else(|| panic!("reply {i}: no DataRow"));
        // DataRow: column count (2), value length (4), value.
        assert_eq!(row.1.len(), 2 + 4 + REPLY_BYTES, "reply {i}");
    }
}

#[test]
fn unix_socket_clients_get_no_tls_and_are_exempt_from_require() {
    let certs = Certs::new("unix", &rcgen::PKCS_ECDSA_P256_SHA256);
    let dir = Path::new(&certs.dir).join("sock");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap().to_string();
    let rw = certs.start(&["--tls-mode", "require", "--unix-socket-dir", &dir]);
    let info = psql_ok(
        &format!("host={dir} port={} user=postgres dbname=postgres", rw.port),
        "\\conninfo",
    );
    assert!(info.contains("via socket"), "{info}");
    assert!(!info.contains("SSL"), "{info}");
}
