//! Identity from a real issuer: RS256 and ES256 tokens verified against a JWKS given as a file
//! or served from a URL (a small server inside the test, counting its fetches), the once-a-
//! minute refetch on an unknown `kid`, every kind of bad token refused over HTTP and over the
//! websocket, and the user a first sign-in provisions. The tests make their own keys; nothing
//! leaves the machine.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use course_forum::testing::auth::identity::handle_candidate;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{self, JWT_SECRET, TestApp, raw_id, unix_now};

const ISSUER: &str = "https://idp.test.invalid/realms/course";
const AUDIENCE: &str = "course-forum-web";
const ME: &str = "{ me { id handle displayName } }";

/// A signing key made for this test, and the public JWK a provider would publish for it.
struct Signer {
    kid: String,
    alg: Algorithm,
    key: EncodingKey,
    jwk: Value,
}

impl Signer {
    fn rsa(kid: &str) -> Signer {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        let private = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).expect("RSA key");
        let der = private.to_pkcs1_der().expect("PKCS#1 DER");
        Self::from_key(kid, Algorithm::RS256, EncodingKey::from_rsa_der(der.as_bytes()))
    }

    fn ec(kid: &str) -> Signer {
        use p256::elliptic_curve::Generate;
        use p256::pkcs8::EncodePrivateKey;
        let secret = p256::SecretKey::generate();
        let der = secret.to_pkcs8_der().expect("PKCS#8 DER");
        Self::from_key(kid, Algorithm::ES256, EncodingKey::from_ec_der(der.as_bytes()))
    }

    fn from_key(kid: &str, alg: Algorithm, key: EncodingKey) -> Signer {
        let mut jwk = Jwk::from_encoding_key(&key, alg).expect("public JWK");
        jwk.common.key_id = Some(kid.to_owned());
        Signer { kid: kid.to_owned(), alg, key, jwk: serde_json::to_value(&jwk).expect("JWK JSON") }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        self.sign_with(header, claims)
    }

    fn sign_with(&self, header: Header, claims: &Value) -> String {
        jsonwebtoken::encode(&header, claims, &self.key).expect("sign")
    }
}

fn secret(bytes: &[u8]) -> EncodingKey {
    EncodingKey::from_secret(bytes).expect("HMAC key")
}

fn jwks(signers: &[&Signer]) -> Value {
    json!({ "keys": signers.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>() })
}

/// Claims a provider would send for `sub`.
fn claims(sub: &str, handle: &str, name: &str) -> Value {
    json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": unix_now(), "exp": unix_now() + 3600,
        "preferred_username": handle, "name": name,
    })
}

/// A JWKS file that is removed when dropped.
struct JwksFile(PathBuf);

impl JwksFile {
    fn write(document: &Value) -> JwksFile {
        let path = std::env::temp_dir().join(format!("cf-jwks-{}.json", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, document.to_string()).expect("write JWKS file");
        JwksFile(path)
    }
}

impl Drop for JwksFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A provider's JWKS endpoint on loopback: serves whatever `document` holds, counts fetches.
struct JwksServer {
    url: String,
    document: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    _server: tokio::task::JoinHandle<()>,
}

impl JwksServer {
    async fn start(document: Value) -> JwksServer {
        let document = Arc::new(Mutex::new(document));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (document.clone(), fetches.clone());
        let router = axum::Router::new().route(
            "/certs",
            axum::routing::get(move || {
                let (served, counted) = (served.clone(), counted.clone());
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body = served.lock().expect("document").clone();
                    axum::Json(body)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind JWKS server");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        JwksServer { url: format!("http://{addr}/certs"), document, fetches, _server: server }
    }

    fn publish(&self, document: Value) {
        *self.document.lock().expect("document") = document;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

async fn spawn_with_jwks(location: &str) -> TestApp {
    let location = location.to_owned();
    TestApp::spawn_with(move |s| {
        s.jwks = Some(location);
        s.jwt_issuer = Some(ISSUER.into());
        s.jwt_audience = Some(AUDIENCE.into());
    })
    .await
}

/// `me` as the token's user: (database id, handle, display name).
async fn me(app: &TestApp, token: &str) -> (i64, String, String) {
    let data = app.gql_ok(Some(token), ME, json!({})).await;
    let me = &data["me"];
    (
        raw_id(me["id"].as_str().expect("id")),
        me["handle"].as_str().expect("handle").to_owned(),
        me["displayName"].as_str().expect("displayName").to_owned(),
    )
}

/// `me` over a websocket opened with the token (graphql-transport-ws).
async fn me_over_websocket(app: &TestApp, token: &str) -> String {
    let mut socket = GqlSocket::connect(app.addr, Some(token)).await.expect("websocket accepted");
    socket.subscribe("me", ME, json!({})).await;
    let data = socket.next_data(Duration::from_secs(10)).await.expect("an answer");
    socket.close().await;
    data["me"]["handle"].as_str().expect("handle").to_owned()
}

/// The token is refused over HTTP (UNAUTHENTICATED, no data) and over the websocket (4403).
async fn assert_refused(app: &TestApp, what: &str, token: &str) {
    let response = app.gql(Some(token), ME, json!({})).await;
    assert_eq!(response["errors"][0]["extensions"]["code"], "UNAUTHENTICATED", "{what}: {response}");
    assert!(response["data"].is_null(), "{what}: {response}");
    match GqlSocket::connect(app.addr, Some(token)).await {
        Ok(_) => panic!("{what}: the websocket accepted the token"),
        Err(refused) => assert_eq!(refused.code, 4403, "{what}: {refused:?}"),
    }
}

async fn count(app: &TestApp, table: &str) -> i64 {
    app.scalar_i64(&format!("SELECT count(*) AS v FROM {table}"), []).await
}

#[tokio::test]
async fn rs256_and_es256_tokens_from_a_jwks_file_sign_in_over_http_and_websocket() {
    let (rsa, ec) = (Signer::rsa("rsa-1"), Signer::ec("ec-1"));
    let file = JwksFile::write(&jwks(&[&rsa, &ec]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;

    let alice = rsa.sign(&claims("sub-alice", "Alice", "Alice Liddell"));
    let (_, handle, name) = me(&app, &alice).await;
    assert_eq!((handle.as_str(), name.as_str()), ("alice", "Alice Liddell"));
    assert_eq!(me_over_websocket(&app, &alice).await, "alice");

    let bob = ec.sign(&claims("sub-bob", "bob", "Bob"));
    assert_eq!(me(&app, &bob).await.1, "bob");
    assert_eq!(me_over_websocket(&app, &bob).await, "bob");
}

#[tokio::test]
async fn jwks_url_tokens_sign_in_a_rotated_key_is_fetched_and_unknown_kids_refetch_at_most_once_a_minute() {
    let (first, rotated, never_published) = (Signer::rsa("2024-a"), Signer::ec("2024-b"), Signer::ec("forged"));
    let provider = JwksServer::start(jwks(&[&first])).await;
    let app = spawn_with_jwks(&provider.url).await;
    assert_eq!(provider.fetches(), 1, "read once at start-up");

    let token = first.sign(&claims("sub-1", "carol", "Carol"));
    assert_eq!(me(&app, &token).await.1, "carol");
    assert_eq!(me_over_websocket(&app, &token).await, "carol");
    assert_eq!(provider.fetches(), 1, "a known kid fetches nothing");

    // The provider rotates: the new key is published, then used. Its kid is unknown here, so
    // the set is fetched again, once.
    provider.publish(jwks(&[&first, &rotated]));
    let token = rotated.sign(&claims("sub-2", "dave", "Dave"));
    assert_eq!(me(&app, &token).await.1, "dave");
    assert_eq!(me_over_websocket(&app, &token).await, "dave");
    assert_eq!(provider.fetches(), 2, "the rotated key cost one fetch");

    // Another unknown kid right after: refused without fetching (within the minute).
    let forged = never_published.sign(&claims("sub-3", "eve", "Eve"));
    assert_refused(&app, "unknown kid within a minute of a fetch", &forged).await;
    assert_eq!(provider.fetches(), 2, "no second fetch within a minute");
    // Known kids are unaffected.
    assert_eq!(me(&app, &first.sign(&claims("sub-1", "carol", "Carol"))).await.1, "carol");
}

#[tokio::test]
async fn bad_tokens_are_refused_over_http_and_websocket() {
    let (rsa, ec) = (Signer::rsa("rsa-1"), Signer::ec("ec-1"));
    let file = JwksFile::write(&jwks(&[&rsa, &ec]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;
    let good = claims("sub-x", "mallory", "Mallory");
    assert_eq!(me(&app, &rsa.sign(&good)).await.1, "mallory", "the good token works");
    let users_before = count(&app, "users").await;

    let with = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut claims = claims("sub-y", "trudy", "Trudy");
        change(claims.as_object_mut().expect("object"));
        claims
    };
    let header = |alg: Algorithm, kid: &str| {
        let mut header = Header::new(alg);
        header.kid = Some(kid.to_owned());
        header
    };
    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    };
    // HS256 keyed with the RSA key's public JWK: the classic key-confusion forgery.
    let confused =
        jsonwebtoken::encode(&header(Algorithm::HS256, "rsa-1"), &good, &secret(rsa.jwk.to_string().as_bytes()))
            .expect("sign");
    let impostor = Signer::rsa("rsa-1");
    let cases: Vec<(&str, String)> = vec![
        ("wrong iss", rsa.sign(&with(&|c| drop(c.insert("iss".into(), json!("https://evil.test.invalid")))))),
        ("wrong aud", ec.sign(&with(&|c| drop(c.insert("aud".into(), json!("another-app")))))),
        ("missing iss", rsa.sign(&with(&|c| drop(c.remove("iss"))))),
        ("missing aud", ec.sign(&with(&|c| drop(c.remove("aud"))))),
        ("expired", rsa.sign(&with(&|c| drop(c.insert("exp".into(), json!(unix_now() - 3600)))))),
        ("missing sub", rsa.sign(&with(&|c| drop(c.remove("sub"))))),
        ("HS256 claiming a JWKS kid", confused),
        (
            "HS256 claiming a JWKS kid, signed with the dev secret",
            jsonwebtoken::encode(&header(Algorithm::HS256, "rsa-1"), &good, &secret(JWT_SECRET.as_bytes()))
                .expect("sign"),
        ),
        ("alg none", format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#), b64(&good.to_string()))),
        ("RS256 on the EC key's kid", rsa.sign_with(header(Algorithm::RS256, "ec-1"), &good)),
        ("ES256 on the RSA key's kid", ec.sign_with(header(Algorithm::ES256, "rsa-1"), &good)),
        ("PS256 with the RSA key", rsa.sign_with(header(Algorithm::PS256, "rsa-1"), &good)),
        ("unknown kid", rsa.sign_with(header(Algorithm::RS256, "rsa-2"), &good)),
        ("no kid", rsa.sign_with(Header::new(Algorithm::RS256), &good)),
        ("right kid, another key's signature", impostor.sign(&good)),
    ];
    for (what, token) in &cases {
        assert_refused(&app, what, token).await;
    }
    assert_eq!(count(&app, "users").await, users_before, "no bad token provisioned anyone");
}

#[tokio::test]
async fn server_tokens_carry_and_require_their_iss_and_aud() {
    let app = TestApp::spawn().await;
    let user = app.create_user("dev_only").await;
    assert_eq!(me(&app, &app.token(user)).await.0, user, "minted tokens carry iss and aud");
    let sign = |claims: Value| {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &secret(JWT_SECRET.as_bytes())).expect("sign")
    };
    let (iss, aud) = (course_forum::testing::auth::DEV_ISSUER, course_forum::testing::auth::DEV_AUDIENCE);
    let sub = user.to_string();
    for (what, claims) in [
        ("no iss", json!({ "sub": sub, "aud": aud, "exp": unix_now() + 3600 })),
        ("no aud", json!({ "sub": sub, "iss": iss, "exp": unix_now() + 3600 })),
        ("wrong iss", json!({ "sub": sub, "iss": ISSUER, "aud": aud, "exp": unix_now() + 3600 })),
        ("wrong aud", json!({ "sub": sub, "iss": iss, "aud": AUDIENCE, "exp": unix_now() + 3600 })),
    ] {
        assert_refused(&app, what, &sign(claims)).await;
    }
    // Without JWKS, provider algorithms are refused outright.
    let rsa = Signer::rsa("rsa-1");
    assert_refused(&app, "RS256 without a JWKS", &rsa.sign(&claims("sub-z", "zed", "Zed"))).await;
}

#[tokio::test]
async fn the_first_token_provisions_the_user_and_later_ones_find_them() {
    let rsa = Signer::rsa("rsa-1");
    let file = JwksFile::write(&jwks(&[&rsa]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;

    let (id, handle, name) =
        me(&app, &rsa.sign(&claims("sub-grace", "Grace.Hopper@navy.example", "Grace Hopper"))).await;
    assert_eq!((handle.as_str(), name.as_str()), ("grace_hopper", "Grace Hopper"));
    // Same subject, new claims: the same user, unchanged.
    let (again, handle, _) = me(&app, &rsa.sign(&claims("sub-grace", "someone_else", "Other Name"))).await;
    assert_eq!((again, handle.as_str()), (id, "grace_hopper"));
    assert_eq!(
        app.scalar_i64(
            "SELECT user_id AS v FROM user_identities WHERE issuer = $1 AND subject = $2",
            [ISSUER.into(), "sub-grace".into()]
        )
        .await,
        id
    );
    // No name claim: the display name is the handle; no usable handle claim: `user`.
    let mut bare = claims("sub-bare", "!!", "");
    bare.as_object_mut().expect("object").remove("name");
    let (_, handle, name) = me(&app, &rsa.sign(&bare)).await;
    assert_eq!((handle.as_str(), name.as_str()), ("user", "user"));
}

#[tokio::test]
async fn a_taken_handle_gets_a_deterministic_suffix() {
    let rsa = Signer::rsa("rsa-1");
    let file = JwksFile::write(&jwks(&[&rsa]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;
    let local = app.create_user("heidi").await;

    let token = rsa.sign(&claims("sub-heidi", "Heidi", "Heidi from the IdP"));
    let (id, handle, name) = me(&app, &token).await;
    assert_ne!(id, local);
    assert_eq!(handle, handle_candidate("heidi", ISSUER, "sub-heidi", 1));
    assert!(handle.starts_with("heidi_") && handle.len() == "heidi_".len() + 8, "{handle}");
    assert_eq!(name, "Heidi from the IdP");

    // Computed again from scratch (the user gone, the handle still taken): the same handle.
    app.scalar_i64("DELETE FROM users WHERE id = $1 RETURNING id AS v", [id.into()]).await;
    let (again, handle_again, _) = me(&app, &token).await;
    assert_ne!(again, id);
    assert_eq!(handle_again, handle);
}

#[tokio::test]
async fn concurrent_first_tokens_of_one_subject_make_one_user() {
    let ec = Signer::ec("ec-1");
    let file = JwksFile::write(&jwks(&[&ec]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;
    let users_before = count(&app, "users").await;
    let token = ec.sign(&claims("sub-ivan", "ivan", "Ivan"));

    let app = &app;
    let answers = futures_util::future::join_all((0..8).map(|_| {
        let token = token.clone();
        async move { me(app, &token).await }
    }))
    .await;
    let first = answers[0].0;
    assert!(answers.iter().all(|(id, handle, _)| *id == first && handle == "ivan"), "{answers:?}");
    assert_eq!(count(app, "users").await, users_before + 1);
    assert_eq!(count(app, "user_identities").await, 1);
}

#[tokio::test]
async fn handle_and_name_claims_are_configurable() {
    let rsa = Signer::rsa("rsa-1");
    let file = JwksFile::write(&jwks(&[&rsa]));
    let location = file.0.to_str().expect("path").to_owned();
    let app = TestApp::spawn_with(move |s| {
        s.jwks = Some(location);
        s.jwt_issuer = Some(ISSUER.into());
        s.jwt_audience = Some(AUDIENCE.into());
        s.jwt_handle_claim = "email".into();
        s.jwt_name_claim = "given_name".into();
    })
    .await;
    let mut claims = claims("sub-judy", "not-this", "Not This");
    let extra = claims.as_object_mut().expect("object");
    extra.insert("email".into(), json!("Judy@uni.example"));
    extra.insert("given_name".into(), json!("Judy"));
    let (_, handle, name) = me(&app, &rsa.sign(&claims)).await;
    assert_eq!((handle.as_str(), name.as_str()), ("judy", "Judy"));
}

#[tokio::test]
async fn jwks_settings_are_checked_at_start_up() {
    let mut settings = common::test_settings("unused", "unused");
    settings.jwks = Some("https://idp.test.invalid/certs".into());
    let err = settings.validate_for_serve().expect_err("JWKS without issuer and audience");
    assert!(err.to_string().contains("JWT_ISSUER and JWT_AUDIENCE"), "{err}");
    settings.jwt_issuer = Some(ISSUER.into());
    assert!(settings.validate_for_serve().is_err(), "audience still missing");
    settings.jwt_audience = Some(AUDIENCE.into());
    settings.validate_for_serve().expect("complete");
    settings.jwks = Some("ftp://idp.test.invalid/certs".into());
    assert!(settings.validate_for_serve().is_err(), "not http(s)");
    // The key set decides whose tokens are good: plain http only to this machine.
    for loopback in
        ["http://127.0.0.1:9000/certs", "http://127.8.9.10/certs", "http://localhost:8080/certs", "http://[::1]/certs"]
    {
        settings.jwks = Some(loopback.into());
        settings.validate_for_serve().unwrap_or_else(|e| panic!("{loopback} refused: {e}"));
    }
    for remote in ["http://idp.test.invalid/certs", "http://10.0.0.7/certs", "http://localhost.evil.example/certs"] {
        settings.jwks = Some(remote.into());
        let err = settings.validate_for_serve().expect_err(remote);
        assert!(err.to_string().contains("JWKS must be an https:// URL"), "{remote}: {err}");
    }
    // And start-up stops on it, before connecting to anything.
    settings.jwks = Some("http://idp.test.invalid/certs".into());
    match course_forum::testing::startup::Application::build(settings.clone()).await {
        Ok(_) => panic!("a server started with an http:// JWKS"),
        Err(err) => assert!(err.to_string().contains("https://"), "{err}"),
    }
    settings.jwks = Some("https://idp.test.invalid/certs".into());
    settings.jwks = None;
    assert!(settings.validate_for_serve().is_err(), "issuer without JWKS");

    // A JWKS file that cannot be read stops start-up with a sentence naming it.
    let missing = std::env::temp_dir().join("cf-jwks-does-not-exist.json");
    let loaded = course_forum::testing::auth::jwks::KeySet::load(
        course_forum::testing::config::JwksSource::File(missing),
        Duration::from_secs(1),
    )
    .await;
    let err = loaded.err().expect("refused");
    assert!(err.to_string().starts_with("JWKS: cannot read"), "{err}");
}

#[tokio::test]
async fn tokens_before_their_nbf_are_refused() {
    let rsa = Signer::rsa("rsa-1");
    let file = JwksFile::write(&jwks(&[&rsa]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;
    let users_before = count(&app, "users").await;
    let mut early = claims("sub-early", "early", "Early");
    early.as_object_mut().expect("object").insert("nbf".into(), json!(unix_now() + 600));
    assert_refused(&app, "a provider token before its nbf", &rsa.sign(&early)).await;
    let response = app.gql(Some(&rsa.sign(&early)), ME, json!({})).await;
    assert!(response["errors"][0]["message"].as_str().unwrap_or_default().contains("Immature"), "{response}");
    assert_eq!(count(&app, "users").await, users_before, "the early token provisioned nobody");
    // Within the leeway, or past: accepted.
    let mut ready = claims("sub-ready", "ready", "Ready");
    ready.as_object_mut().expect("object").insert("nbf".into(), json!(unix_now() + 2));
    assert_eq!(me(&app, &rsa.sign(&ready)).await.1, "ready");

    // The server's own tokens carry no nbf, but one that does is held to it too.
    let app = TestApp::spawn().await;
    let user = app.create_user("dev_early").await;
    let (iss, aud) = (course_forum::testing::auth::DEV_ISSUER, course_forum::testing::auth::DEV_AUDIENCE);
    let dev = |nbf: u64| {
        let claims = json!({ "sub": user.to_string(), "iss": iss, "aud": aud, "iat": unix_now(), "exp": unix_now() + 3600, "nbf": nbf });
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &secret(JWT_SECRET.as_bytes())).expect("sign")
    };
    assert_refused(&app, "a server token before its nbf", &dev(unix_now() + 600)).await;
    let response = app.gql(Some(&dev(unix_now() + 600)), ME, json!({})).await;
    assert!(response["errors"][0]["message"].as_str().unwrap_or_default().contains("Immature"), "{response}");
    assert_eq!(me(&app, &dev(unix_now() - 10)).await.0, user);
}

#[tokio::test]
async fn the_development_secret_is_refused_beside_a_jwks_unless_allowed() {
    let rsa = Signer::rsa("rsa-1");
    let file = JwksFile::write(&jwks(&[&rsa]));
    let app = spawn_with_jwks(file.0.to_str().expect("path")).await;
    let victim = me(&app, &rsa.sign(&claims("sub-victim", "victim", "Victim"))).await.0;
    // Whoever holds JWT_SECRET could otherwise mint `sub` = any user id.
    assert_refused(&app, "a dev token for a provider's user", &app.token(victim)).await;
    let local = app.create_user("local_user").await;
    assert_refused(&app, "a dev token beside a JWKS", &app.token(local)).await;
    let response = app.gql(Some(&app.token(local)), ME, json!({})).await;
    let message = response["errors"][0]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("ALLOW_DEV_TOKENS_WITH_JWKS"), "{response}");

    // Allowed on purpose: both kinds work, over HTTP and the websocket.
    let location = file.0.to_str().expect("path").to_owned();
    let app = TestApp::spawn_with(move |s| {
        s.jwks = Some(location);
        s.jwt_issuer = Some(ISSUER.into());
        s.jwt_audience = Some(AUDIENCE.into());
        s.allow_dev_tokens_with_jwks = true;
    })
    .await;
    let dev_user = app.create_user("dev_user").await;
    assert_eq!(me(&app, &app.token(dev_user)).await.0, dev_user);
    assert_eq!(me_over_websocket(&app, &app.token(dev_user)).await, "dev_user");
    assert_eq!(me(&app, &rsa.sign(&claims("sub-alice", "alice", "Alice"))).await.1, "alice");
}

// ---------------------------------------------------------------------------------------------
// Identity by proof: the command line never takes a handle for a person
// ---------------------------------------------------------------------------------------------

/// Runs the `course-forum` binary against the test's database.
fn course_forum_cli(app: &TestApp, args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_course-forum"));
    command.args(args);
    for var in ["DATABASE_URL", "JWT_SECRET", "BIND", "LIKE_MODE", "REDIS_URL", "CONNECT_TIMEOUT", "RUST_LOG", "JWKS"] {
        command.env_remove(var);
    }
    command.env("DATABASE_URL", common::database_url(&app.database)).env("RUST_LOG", "warn");
    command.output().expect("run course-forum")
}

fn out(output: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn roster_file(text: &str) -> JwksFile {
    let path = std::env::temp_dir().join(format!("cf-roster-{}.csv", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, text).expect("write roster file");
    JwksFile(path)
}

/// The documented setup: handles from the `email` claim.
async fn spawn_with_email_handles(file: &JwksFile) -> TestApp {
    let location = file.0.to_str().expect("path").to_owned();
    TestApp::spawn_with(move |s| {
        s.jwks = Some(location);
        s.jwt_issuer = Some(ISSUER.into());
        s.jwt_audience = Some(AUDIENCE.into());
        s.jwt_handle_claim = "email".into();
    })
    .await
}

fn email_claims(sub: &str, email: &str) -> Value {
    let mut claims = claims(sub, "unused", "Someone");
    claims.as_object_mut().expect("object").insert("email".into(), json!(email));
    claims
}

/// `myCourses` as (code, role).
async fn my_courses(app: &TestApp, token: &str) -> Vec<(String, String)> {
    let data = app.gql_ok(Some(token), "{ myCourses { code myRole } }", json!({})).await;
    data["myCourses"]
        .as_array()
        .map(|courses| {
            courses
                .iter()
                .map(|c| (c["code"].as_str().unwrap_or("").to_owned(), c["myRole"].as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

async fn identity_owner(app: &TestApp, subject: &str) -> i64 {
    app.scalar_i64(
        "SELECT coalesce((SELECT user_id FROM user_identities WHERE issuer = $1 AND subject = $2), 0) AS v",
        [ISSUER.into(), subject.into()],
    )
    .await
}

#[tokio::test]
async fn a_roster_line_finds_people_by_identity_and_never_by_a_handle_they_chose() {
    let rsa = Signer::rsa("rsa-1");
    let keys = JwksFile::write(&jwks(&[&rsa]));
    let app = spawn_with_email_handles(&keys).await;

    // Someone signs in first with an address that makes them `dr_tran`.
    let squatter_token = rsa.sign(&email_claims("sub-squatter", "dr.tran@students.example"));
    let (squatter, handle, _) = me(&app, &squatter_token).await;
    assert_eq!(handle, "dr_tran");
    // Users an operator made: bob (no identity yet), carl (linked to another identity already).
    let bob = app.create_user("bob").await;
    let carl = app.create_user("carl").await;
    app.scalar_i64(
        "INSERT INTO user_identities (issuer, subject, user_id) VALUES ($1, 'sub-carl-1', $2) RETURNING user_id AS v",
        [ISSUER.into(), carl.into()],
    )
    .await;

    let file = roster_file(&format!(
        "course_code,course_title,handle,display_name,role,issuer,subject\n\
         CS101,Intro,dr_tran,Dr. Minh Tran,instructor,{ISSUER},sub-real-tran\n\
         CS101,Intro,bob,Bob,student,{ISSUER},sub-bob\n\
         CS101,Intro,carl,Carl,student,{ISSUER},sub-carl-2\n\
         CS101,Intro,alice,Alice,student,,\n"
    ));
    let output = course_forum_cli(&app, &["roster", "import", file.0.to_str().expect("path")]);
    let (stdout, stderr) = out(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("! line 2: skipped: @dr_tran was provisioned by their own sign-in"), "{stdout}");
    assert!(stdout.contains("! line 4: skipped: @carl is already linked to another identity"), "{stdout}");
    // The rest of the file applies: bob (an operator's user) takes his identity, alice is new.
    for line in ["+ identity @bob = ", "+ CS101 @bob student", "+ CS101 @alice student", "lines skipped: 2"] {
        assert!(stdout.contains(line), "missing `{line}` in:\n{stdout}");
    }
    assert_eq!(identity_owner(&app, "sub-bob").await, bob);
    assert_eq!(me(&app, &rsa.sign(&email_claims("sub-bob", "bob@uni.example"))).await.0, bob);
    assert_eq!(identity_owner(&app, "sub-carl-2").await, 0, "carl got a second identity");

    // The squatter is no instructor, and the real person's token is not the squatter's account.
    assert_eq!(my_courses(&app, &squatter_token).await, vec![]);
    assert_eq!(identity_owner(&app, "sub-real-tran").await, 0, "the real identity was linked by name");
    let real_token = rsa.sign(&email_claims("sub-real-tran", "minh.tran@uni.example"));
    let (real, real_handle, _) = me(&app, &real_token).await;
    assert_ne!(real, squatter);
    assert_eq!(real_handle, "minh_tran");

    // Once the real person has signed in, the same line finds them by their identity, under
    // whatever handle they have.
    let output = course_forum_cli(&app, &["roster", "import", file.0.to_str().expect("path")]);
    let (stdout, stderr) = out(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("+ CS101 @minh_tran instructor"), "{stdout}");
    assert_eq!(my_courses(&app, &real_token).await, vec![("CS101".to_owned(), "INSTRUCTOR".to_owned())]);
    assert_eq!(my_courses(&app, &squatter_token).await, vec![]);

    // A line without an identity does not name a self-provisioned user by their handle either.
    let file =
        roster_file("course_code,course_title,handle,display_name,role\nCS102,Other,dr_tran,Dr Tran,instructor\n");
    let output = course_forum_cli(&app, &["roster", "import", file.0.to_str().expect("path")]);
    let (stdout, stderr) = out(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("! line 2: skipped: @dr_tran was provisioned by their own sign-in"), "{stdout}");
    assert_eq!(my_courses(&app, &squatter_token).await, vec![]);
}

#[tokio::test]
async fn admin_grant_never_takes_a_handle_for_proof() {
    let rsa = Signer::rsa("rsa-1");
    let keys = JwksFile::write(&jwks(&[&rsa]));
    let app = spawn_with_email_handles(&keys).await;
    let squatter_token = rsa.sign(&email_claims("sub-squatter", "dr.tran@students.example"));
    let (squatter, handle, _) = me(&app, &squatter_token).await;
    assert_eq!(handle, "dr_tran");
    let admins = || app.scalar_i64("SELECT count(*) AS v FROM administrators", []);

    for args in [
        &["admin", "grant", "--user", "dr_tran", "--issuer", ISSUER, "--subject", "sub-real-tran"][..],
        &["admin", "grant", "--user", "dr_tran"][..],
        &["admin", "grant", "--user", "@dr_tran"][..],
    ] {
        let output = course_forum_cli(&app, args);
        let (stdout, stderr) = out(&output);
        assert!(!output.status.success(), "{args:?} granted: {stdout}");
        assert!(stderr.contains("refused: @dr_tran was provisioned by their own sign-in"), "{args:?}: {stderr}");
        assert_eq!(admins().await, 0, "{args:?}");
    }
    assert_eq!(identity_owner(&app, "sub-real-tran").await, 0, "the real identity was linked by name");
    // Nobody has the real identity yet, and no --user names an account for it.
    let output = course_forum_cli(&app, &["admin", "grant", "--issuer", ISSUER, "--subject", "sub-real-tran"]);
    assert!(!output.status.success());
    assert!(out(&output).1.contains("nobody has"), "{}", out(&output).1);

    // The real person signs in, and is granted by their identity.
    let real_token = rsa.sign(&email_claims("sub-real-tran", "minh.tran@uni.example"));
    let (real, _, _) = me(&app, &real_token).await;
    assert_ne!(real, squatter);
    let output = course_forum_cli(&app, &["admin", "grant", "--issuer", ISSUER, "--subject", "sub-real-tran"]);
    let (stdout, stderr) = out(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("@minh_tran") && stdout.contains("is now an administrator"), "{stdout}");
    assert_eq!(app.scalar_i64("SELECT user_id AS v FROM administrators", []).await, real);
    // An identity and a --user that disagree are refused.
    let output = course_forum_cli(
        &app,
        &["admin", "grant", "--user", &squatter.to_string(), "--issuer", ISSUER, "--subject", "sub-real-tran"],
    );
    assert!(!output.status.success());
    assert!(out(&output).1.contains("is @minh_tran's identity, not @dr_tran's"), "{}", out(&output).1);

    // An operator's user without an identity takes one with the grant, and signs in with it.
    let prof = app.create_user("prof").await;
    let output =
        course_forum_cli(&app, &["admin", "grant", "--user", "prof", "--issuer", ISSUER, "--subject", "sub-prof"]);
    let (stdout, stderr) = out(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("linked") && stdout.contains("is now an administrator"), "{stdout}");
    assert_eq!(me(&app, &rsa.sign(&email_claims("sub-prof", "prof@uni.example"))).await.0, prof);
    assert_eq!(admins().await, 2);
}
