use super::*;

#[derive(clap::Parser)]
struct Serve {
    #[command(flatten)]
    cfg: Config,
}

#[test]
fn the_boot_line_masks_every_dsn_password() {
    for dsn in [
        "postgresql://u:hunter2@h:5432/db",
        "postgresql://h/db?user=u&password=hunter2",
        "host=h user=u password=hunter2 dbname=d",
    ] {
        let cfg = <Serve as clap::Parser>::parse_from(["queen", "--database-url", dsn]).cfg;
        let line = cfg.describe();
        assert!(!line.contains("hunter2"), "{dsn}: {line}");
        assert!(line.contains("****"), "{dsn}: {line}");
    }
}

#[test]
fn a_malformed_encryption_key_is_refused_without_echoing_it() {
    let typo = format!("{}zz", "ab".repeat(31));
    let err = <Serve as clap::Parser>::try_parse_from(["queen", "--encryption-key", &typo])
        .err()
        .expect("a malformed key is refused");
    let text = err.to_string();
    assert!(!text.contains(&typo) && !text.contains("abab"), "{text}");
    assert!(text.contains("QUEEN_ENCRYPTION_KEY"), "{text}");
}

#[test]
fn help_never_shows_the_values_of_secret_variables() {
    let cmd = <Serve as clap::CommandFactory>::command();
    for secret in [
        "DATABASE_URL",
        "PG_PASSWORD",
        "QUEEN_ENCRYPTION_KEY",
        "JWT_SECRET",
    ] {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_env() == Some(std::ffi::OsStr::new(secret)))
            .unwrap_or_else(|| panic!("{secret} is a setting"));
        assert!(arg.is_hide_env_values_set(), "{secret} shown by --help");
    }
}

#[test]
fn days() {
    assert_eq!(parse_days("0.5"), Ok(0.5));
    assert!(parse_days("0").is_err());
    assert!(parse_days("-1").is_err());
    assert!(parse_days("NaN").is_err());
    assert!(parse_days("soon").is_err());
}

#[test]
fn encryption_keys_are_checked_and_never_shown() {
    let hex = "ab".repeat(32);
    let key = EncryptionKey::from_hex(&hex).expect("64 hex digits");
    assert_eq!(key.bytes()[0], 0xab);
    assert!(!format!("{key:?}").contains("ab"));
    let err = EncryptionKey::from_hex("secret-but-short").expect_err("too short");
    assert!(!err.contains("secret"), "{err}");
}

#[test]
fn peer_wake_is_auto_by_default_and_on_only_with_an_external_database() {
    assert_eq!(parse_peer_wake("AUTO"), Ok(PeerWake::Auto));
    assert_eq!(parse_peer_wake("on"), Ok(PeerWake::On));
    assert_eq!(parse_peer_wake("0"), Ok(PeerWake::Off));
    assert!(parse_peer_wake("sometimes").is_err());
    let mut cfg = <Serve as clap::Parser>::parse_from(["queen"]).cfg;
    cfg.database_url = None;
    cfg.pg_host = None;
    assert_eq!(cfg.peer_wake, PeerWake::Auto);
    assert!(!cfg.peer_wake_on(), "embedded: one broker");
    cfg.pg_host = Some("db.internal".into());
    assert!(cfg.peer_wake_on(), "external: brokers may share it");
    cfg.peer_wake = PeerWake::Off;
    assert!(!cfg.peer_wake_on());
}

#[test]
fn bools() {
    assert_eq!(parse_bool("ON"), Ok(true));
    assert_eq!(parse_bool("0"), Ok(false));
    assert!(parse_bool("maybe").is_err());
}

fn jwt(args: &[&str]) -> JwtConfig {
    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        jwt: JwtConfig,
    }
    let argv = std::iter::once("queen").chain(args.iter().copied());
    <Only as clap::Parser>::try_parse_from(argv)
        .expect("parses")
        .jwt
}

#[test]
fn jwt_combinations() {
    assert!(jwt(&[]).check().is_ok(), "off needs nothing");
    let no_key = jwt(&["--jwt-enabled"]).check().expect_err("no key");
    assert!(no_key.contains("JWT_SECRET"), "{no_key}");
    let hs = jwt(&["--jwt-enabled", "--jwt-secret", "s"]);
    assert!(hs.check().is_ok());
    assert_eq!(hs.accepted(), vec![JwtAlgorithm::Hs256]);
    let rs_without_key = jwt(&["--jwt-enabled", "--jwt-secret=s", "--jwt-algorithm=RS256"]);
    let e = rs_without_key.check().expect_err("RS256 has no key");
    assert!(e.contains("RS256") && e.contains("JWT_JWKS_URL"), "{e}");
    let both = jwt(&[
        "--jwt-enabled",
        "--jwt-jwks-url=http://127.0.0.1:1/jwks",
        "--jwt-algorithm=hs256,ES256",
        "--jwt-secret=s",
        "--jwt-audience=queen",
        "--jwt-jwks-allow-http",
    ]);
    assert_eq!(both.check(), Ok(()));
    assert_eq!(
        both.accepted(),
        vec![JwtAlgorithm::Hs256, JwtAlgorithm::Es256]
    );
    let empty = jwt(&["--jwt-enabled", "--jwt-secret="]);
    assert!(empty.check().expect_err("empty").contains("empty"));
    let skip = jwt(&["--jwt-enabled", "--jwt-secret=s", "--jwt-skip-paths=/a/, b"]);
    assert!(skip.check().expect_err("not a path").contains("\"b\""));
    let verb = jwt(&[
        "--jwt-enabled",
        "--jwt-secret=s",
        "--jwt-skip-paths=FETCH /a",
    ]);
    assert!(verb
        .check()
        .expect_err("no method")
        .contains("\"FETCH\" is not a method"));
}

#[test]
fn public_keys_need_an_audience_and_jwks_needs_tls() {
    let jwks = ["--jwt-enabled", "--jwt-jwks-url=https://idp.test/jwks"];
    let e = jwt(&jwks).check().expect_err("no audience");
    assert!(e.contains("JWT_AUDIENCE is not set"), "{e}");
    let pem = jwt(&["--jwt-enabled", "--jwt-public-key=/k.pem"]);
    assert!(pem
        .check()
        .expect_err("no audience")
        .contains("JWT_AUDIENCE"));
    let with_aud = jwt(&[jwks[0], jwks[1], "--jwt-audience=queen"]);
    assert_eq!(with_aud.check(), Ok(()));
    let waived = jwt(&[jwks[0], jwks[1], "--jwt-require-audience=false"]);
    assert_eq!(waived.check(), Ok(()));
    let secret_only = jwt(&["--jwt-enabled", "--jwt-secret=s"]);
    assert!(
        !secret_only.audience_required(),
        "a shared secret is this broker's own"
    );
    let demanded = jwt(&[
        "--jwt-enabled",
        "--jwt-secret=s",
        "--jwt-require-audience=yes",
    ]);
    assert!(demanded.check().is_err());

    let http = [
        "--jwt-enabled",
        "--jwt-audience=queen",
        "--jwt-jwks-url=HTTP://u:pw@idp.test/jwks",
    ];
    let e = jwt(&http).check().expect_err("http JWKS");
    assert!(
        e.contains("JWT_JWKS_ALLOW_HTTP") && !e.contains("pw@"),
        "{e}"
    );
    let allowed = jwt(&[http[0], http[1], http[2], "--jwt-jwks-allow-http"]);
    assert_eq!(allowed.check(), Ok(()));
}

#[test]
fn jwt_describe_hides_secrets() {
    let cfg = jwt(&[
        "--jwt-enabled",
        "--jwt-secret=hunter2",
        "--jwt-jwks-url=http://u:pw@127.0.0.1:1/jwks",
    ]);
    let line = cfg.describe();
    assert!(!line.contains("hunter2") && !line.contains("pw@"), "{line}");
    assert!(line.contains("secret=set") && line.contains("algorithms=HS256,RS256,ES256"));
    assert_eq!(jwt(&[]).describe(), "jwt=off");
}
