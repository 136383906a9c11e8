//! The proxy's keys of a budgets file, as `inflight_proxy::config::ProxyFile` reads them: every
//! mistake named by its path.
use inflight_proxy::config::{ProxyFile, Release};

fn refused(text: &str) -> String {
    ProxyFile::from_toml_str(text)
        .expect_err("the file must be refused")
        .to_string()
}

#[test]
fn a_proxied_budget_loads_with_its_defaults() {
    let file = ProxyFile::from_toml_str(
        r#"
        [proxy]
        admin = "127.0.0.1:9901"
        drain = "3s"

        [budgets.records]
        max_concurrent = 6
        upstream = "http://127.0.0.1:7070/"
        listen = "127.0.0.1:7002"

        [budgets.enrichment]
        max_concurrent = 24
        upstream = "http://Enrich.internal"
        listen = "[::1]:7003"
        release = "headers"
        overload_status = [503]
        preserve_host = true

        [budgets.local]
        max_concurrent = 2
        "#,
    )
    .unwrap();
    let proxy = file.proxy().unwrap();
    assert_eq!(proxy.admin(), Some("127.0.0.1:9901".parse().unwrap()));
    assert_eq!(proxy.drain(), std::time::Duration::from_secs(3));
    let records = file.route("records").unwrap();
    assert_eq!(records.upstream().url(), "http://127.0.0.1:7070");
    assert_eq!(records.upstream().authority(), "127.0.0.1:7070");
    assert_eq!(records.upstream().port(), 7070);
    assert_eq!(records.listen(), "127.0.0.1:7002".parse().unwrap());
    assert_eq!(records.release(), Release::Body);
    assert_eq!(records.overload_status(), [429, 503]);
    assert!(!records.preserve_host());
    let enrichment = file.route("enrichment").unwrap();
    assert_eq!(enrichment.upstream().host(), "Enrich.internal");
    assert_eq!(enrichment.upstream().port(), 80);
    assert_eq!(enrichment.release(), Release::Headers);
    assert_eq!(enrichment.overload_status(), [503]);
    assert!(enrichment.preserve_host());
    assert!(!enrichment.upstream_http2());
    assert!(file.route("local").is_none());
    let names: Vec<_> = file.routes().map(|(b, _)| b.name()).collect();
    assert_eq!(names, ["records", "enrichment"]);
}

#[test]
fn a_file_without_proxy_keys_has_no_proxy_table() {
    let file = ProxyFile::from_toml_str("[budgets.a]\nmax_concurrent = 1\n").unwrap();
    assert!(file.proxy().is_none());
    assert_eq!(file.routes().count(), 0);
}

#[test]
fn each_mistake_names_its_field() {
    let base = "[budgets.r]\nmax_concurrent = 1\n";
    let cases = [
        (
            "upstream = \"http://127.0.0.1:1\"\n",
            "budgets.r.listen: missing",
        ),
        ("listen = \"127.0.0.1:1\"\n", "budgets.r.upstream: missing"),
        (
            "release = \"body\"\n",
            "budgets.r.release: only a proxied budget takes this",
        ),
        (
            "upstream = \"127.0.0.1:7070\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must start with http://",
        ),
        (
            "upstream = \"ftp://x\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must start with http:// or https://",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nca_file = \"ca.pem\"\n",
            "budgets.r.ca_file: \"ca.pem\" is a CA file, and only an https:// upstream takes one, not \"http://x\"",
        ),
        (
            "upstream = \"https://x\"\nlisten = \"127.0.0.1:1\"\nca_file = 3\n",
            "budgets.r.ca_file: must be the path of a PEM file",
        ),
        (
            "upstream = \"https://x\"\nlisten = \"127.0.0.1:1\"\nca_file = \"/nonexistent/ca.pem\"\n",
            "budgets.r.ca_file: \"/nonexistent/ca.pem\": cannot read it: No such file",
        ),
        (
            "upstream = \"http://x/v1\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must not have a path",
        ),
        (
            "upstream = \"http://x:0\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must have a port from 1 to 65535",
        ),
        (
            "upstream = \"http://x:99999\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must have a port from 1 to 65535",
        ),
        (
            "upstream = \"http://\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must name a host",
        ),
        (
            "upstream = \"http://u:p@x\"\nlisten = \"127.0.0.1:1\"\n",
            "budgets.r.upstream: must not carry a user name",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"localhost:1\"\n",
            "budgets.r.listen: must be an IP address and port",
        ),
        (
            "upstream = \"http://x\"\nlisten = 7002\n",
            "budgets.r.listen: must be an address string",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nrelease = \"trailers\"\n",
            "budgets.r.release: must be \"body\" or \"headers\", got string \"trailers\"",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\noverload_status = [503, 700]\n",
            "budgets.r.overload_status: each status must be a whole number from 100 to 599, got integer 700",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\noverload_status = 503\n",
            "budgets.r.overload_status: must be a list",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\npreserve_host = \"yes\"\n",
            "budgets.r.preserve_host: must be true or false",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nupstream_http2 = 1\n",
            "budgets.r.upstream_http2: must be true or false",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\non_client_gone = \"keep\"\n",
            "budgets.r.on_client_gone: must be \"cancel\" or \"finish\", got string \"keep\"",
        ),
        (
            "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\non_client_gone = \"finish\"\n",
            "budgets.r.on_client_gone: \"finish\" needs the budget's call_timeout",
        ),
    ];
    for (extra, expected) in cases {
        let err = refused(&format!("{base}{extra}"));
        assert!(err.starts_with(expected), "{extra:?}: {err}");
    }
}

/// A self-signed CA certificate (P-256).
const PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBmjCCAUGgAwIBAgIUaemB69Nt5NYt9kRNuicmGTpZqDEwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXaW5mbGlnaHQgY29uZmlnIHRlc3QgQ0EwIBcNMjYxMjAxMTEz
NjA2WhgPMjEyNjExMDcxMTM2MDZaMCIxIDAeBgNVBAMMF2luZmxpZ2h0IGNvbmZp
ZyB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEPSsgSyxPwes68sDA
TlA8sVuI+QaTSo3XJLNS8psIOPJNLZ/9xEBJh/D3nE+bKces8TZs2BCFTPUx/XIp
VbmDd6NTMFEwHQYDVR0OBBYEFBu6jNvE9HFisi6B/r/ml5NuzA4eMB8GA1UdIwQY
MBaAFBu6jNvE9HFisi6B/r/ml5NuzA4eMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDRwAwRAIgKhV0fBURQaa3jleXXYvqt4sR1b8J657nAYMAcZtUwTkCIG2Z
1UoGFamLwUG3enYY8F2yIoMkXlRkK0vRVk6rfWJv
-----END CERTIFICATE-----
";

fn https_budget(extra: &str) -> String {
    format!(
        "[budgets.r]\nmax_concurrent = 1\nupstream = \"https://records.internal\"\nlisten = \"127.0.0.1:1\"\n{extra}"
    )
}

#[test]
fn an_https_upstream_loads_with_the_system_roots_or_a_ca_file_beside_the_budgets_file() {
    let file = ProxyFile::from_toml_str(&https_budget("")).unwrap();
    let route = file.route("r").unwrap();
    assert_eq!(route.upstream().scheme(), "https");
    assert!(route.upstream().is_tls());
    assert_eq!(route.upstream().port(), 443);
    assert!(route.ca_file().is_none());

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::write(dir.path().join("certs/ca.pem"), format!("{PEM}{PEM}")).unwrap();
    let file = dir.path().join("budgets.toml");
    std::fs::write(&file, https_budget("ca_file = \"certs/ca.pem\"\n")).unwrap();
    let file = ProxyFile::from_path(&file).unwrap();
    let ca = file.route("r").unwrap().ca_file().unwrap();
    assert_eq!(ca.path(), dir.path().join("certs/ca.pem"));
    assert_eq!(ca.certificates().len(), 2);
    let der = ca.certificates().next().unwrap();
    assert_eq!((der.len(), der[0]), (414, 0x30), "one DER SEQUENCE");
    // Text has no folder of its own: the current directory's file, which is not there.
    let err = refused(&https_budget("ca_file = \"certs/ca.pem\"\n"));
    assert!(
        err.starts_with("budgets.r.ca_file: \"certs/ca.pem\": cannot read it"),
        "{err}"
    );
    let http = ProxyFile::from_toml_str(
        "[budgets.r]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    assert_eq!(http.route("r").unwrap().upstream().scheme(), "http");
    assert_eq!(http.route("r").unwrap().upstream().port(), 80);
}

#[test]
fn a_ca_file_without_a_certificate_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.pem", String::new(), "holds no PEM certificate"),
        (
            "key.pem",
            "-----BEGIN PRIVATE KEY-----\nMAMCAQU=\n-----END PRIVATE KEY-----\n".into(),
            "holds no PEM certificate",
        ),
        (
            "cut.pem",
            "-----BEGIN CERTIFICATE-----\nMAMCAQU=\n".into(),
            "is not valid PEM: missing section end marker",
        ),
        (
            "garbage.pem",
            "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n".into(),
            "certificate 1 of 1 is not a valid X.509 certificate",
        ),
        (
            "second.pem",
            format!("{PEM}-----BEGIN CERTIFICATE-----\nMAMCAQU=\n-----END CERTIFICATE-----\n"),
            "certificate 2 of 2 is not a valid X.509 certificate",
        ),
    ];
    for (name, text, why) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let err = refused(&https_budget(&format!(
            "ca_file = {:?}\n",
            path.display().to_string()
        )));
        let expected = format!("budgets.r.ca_file: {:?}: {why}", path.display().to_string());
        assert!(err.starts_with(&expected), "{name}: {err}");
    }
    // A folder is no file.
    let err = refused(&https_budget(&format!(
        "ca_file = {:?}\n",
        dir.path().display().to_string()
    )));
    assert!(err.contains("cannot read it"), "{err}");
    // Nor is a file without end read whole.
    let err = refused(&https_budget("ca_file = \"/dev/zero\"\n"));
    assert!(err.contains("larger than 4 MiB"), "{err}");
}

#[test]
fn a_class_header_is_a_header_name_of_a_budget_with_classes() {
    let base =
        "[budgets.r]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\n";
    let classes = "classes = { interactive = 4, batch = 1 }\n";
    let file = ProxyFile::from_toml_str(&format!("{base}{classes}class_header = \"X-Priority\"\n"))
        .unwrap();
    assert_eq!(file.route("r").unwrap().class_header(), Some("x-priority"));
    let none = ProxyFile::from_toml_str(&format!("{base}{classes}")).unwrap();
    assert_eq!(none.route("r").unwrap().class_header(), None);
    let long = "x".repeat(129);
    let cases = [
        (
            format!("{base}class_header = \"x-priority\"\n"),
            "budgets.r.class_header: only a budget with classes takes this",
        ),
        (
            format!("{base}{classes}class_header = \"x priority\"\n"),
            "budgets.r.class_header: must be a header name like \"x-priority\" (letters, digits and !#$%&'*+-.^_`|~), got \"x priority\"",
        ),
        (
            format!("{base}{classes}class_header = \"\"\n"),
            "budgets.r.class_header: must be a header name",
        ),
        (
            format!("{base}{classes}class_header = 1\n"),
            "budgets.r.class_header: must be a header name like \"x-priority\", got integer 1",
        ),
        (
            format!("{base}{classes}class_header = \"{long}\"\n"),
            "budgets.r.class_header: must be at most 128 characters, got 129",
        ),
        (
            "[budgets.r]\nmax_concurrent = 1\nclasses = { a = 1 }\nclass_header = \"x-priority\"\n".to_string(),
            "budgets.r.class_header: only a proxied budget takes this",
        ),
    ];
    for (text, expected) in cases {
        let err = refused(&text);
        assert!(err.starts_with(expected), "{text:?}: {err}");
    }
}

#[test]
fn the_proxy_table_is_checked() {
    let err = refused("[proxy]\nadmin = \"nowhere\"\n[budgets.a]\nmax_concurrent = 1\n");
    assert!(
        err.starts_with("proxy.admin: must be an IP address"),
        "{err}"
    );
    let err = refused("[proxy]\ndrain = \"0s\"\n[budgets.a]\nmax_concurrent = 1\n");
    assert!(
        err.starts_with("proxy.drain: must be greater than zero"),
        "{err}"
    );
    let err = refused("[proxy]\nadmn = \"127.0.0.1:1\"\n[budgets.a]\nmax_concurrent = 1\n");
    assert!(err.starts_with("proxy.admn: unknown key"), "{err}");
    let err = refused("proxy = 3\n[budgets.a]\nmax_concurrent = 1\n");
    assert!(err.starts_with("proxy: must be a table"), "{err}");
}

#[test]
fn addresses_are_not_shared() {
    let err = refused(
        r#"
        [proxy]
        admin = "127.0.0.1:7002"
        [budgets.a]
        max_concurrent = 1
        upstream = "http://127.0.0.1:1"
        listen = "127.0.0.1:7002"
        [budgets.b]
        max_concurrent = 1
        upstream = "http://127.0.0.1:1"
        listen = "127.0.0.1:7002"
        "#,
    );
    assert!(
        err.contains("budgets.b.listen: 127.0.0.1:7002 is already the listen address of budgets.a"),
        "{err}"
    );
    assert!(
        err.contains("proxy.admin: 127.0.0.1:7002 is already the listen address of budgets.a"),
        "{err}"
    );
    // Port 0 picks a free port for each, so it is never shared.
    ProxyFile::from_toml_str(
        r#"
        [budgets.a]
        max_concurrent = 1
        upstream = "http://127.0.0.1:1"
        listen = "127.0.0.1:0"
        [budgets.b]
        max_concurrent = 1
        upstream = "http://127.0.0.1:1"
        listen = "127.0.0.1:0"
        "#,
    )
    .unwrap();
}

/// The budgets' own check refuses a key no reader names, with its path, and knows the proxy's
/// keys only when the proxy reads the file.
#[test]
fn keys_no_reader_knows_are_refused_with_their_path() {
    let text = "[budgets.r]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nupstreem = 1\n";
    let err = ProxyFile::from_toml_str(text).unwrap_err();
    assert_eq!(err.field(), Some("budgets.r.upstreem"));
    assert!(err.to_string().contains("unknown key"), "{err}");
    assert!(
        err.to_string().contains("upstream"),
        "the proxy's keys are expected: {err}"
    );

    let err = ProxyFile::from_toml_str("[proxyy]\n[budgets.r]\nmax_concurrent = 1\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "proxyy: unknown top-level key (expected only [budgets.<name>] tables, [fleet] and [proxy])"
    );
    let err = ProxyFile::from_toml_str("[proxy]\nadmn = 1\n[budgets.r]\nmax_concurrent = 1\n")
        .unwrap_err();
    assert_eq!(err.field(), Some("proxy.admn"));

    // Read as budgets alone, the proxy's keys are unknown.
    let err = inflight::Budgets::from_toml_str(
        "[budgets.r]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\n",
    )
    .unwrap_err();
    assert_eq!(err.errors().len(), 2, "{err}");
    assert_eq!(err.field(), Some("budgets.r.upstream"));
}

/// Mistakes in the budgets' keys and in the proxy's come together, in the file's order, and a
/// file names itself once.
#[test]
fn every_readers_mistakes_come_together_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    std::fs::write(
        &path,
        "[proxy]\ndrain = \"0s\"\n\n[budgets.a]\nmax_concurrent = 1\nupstream = \"x\"\nlisten = \"127.0.0.1:1\"\n\n[budgets.b]\nmax_concurrent = 0\n",
    )
    .unwrap();
    let err = ProxyFile::from_path(&path).unwrap_err();
    assert_eq!(err.path(), Some(path.as_path()));
    let fields: Vec<_> = err.errors().iter().filter_map(|e| e.field()).collect();
    assert_eq!(
        fields,
        [
            "proxy.drain",
            "budgets.a.upstream",
            "budgets.b.max_concurrent"
        ]
    );
}

/// `[[proxy.routes]]`: a listener's default is the budget that listens there; rules pick others
/// by longest prefix, a rule with a host first; a budget reached only by a route listens there.
#[test]
fn routes_make_listeners_with_a_default_and_rules_longest_prefix_first() {
    let file = ProxyFile::from_toml_str(
        r#"
        [budgets.search]
        max_concurrent = 16
        upstream = "http://127.0.0.1:7070"
        listen = "127.0.0.1:7002"

        [budgets.export]
        max_concurrent = 2
        upstream = "http://127.0.0.1:7070"

        [budgets.report]
        max_concurrent = 1
        upstream = "http://127.0.0.1:7070"

        [budgets.admin_export]
        max_concurrent = 1
        upstream = "http://127.0.0.1:7070"

        [[proxy.routes]]
        listen = "127.0.0.1:7002"
        prefix = "/export"
        budget = "export"

        [[proxy.routes]]
        listen = "127.0.0.1:7002"
        prefix = "/export/report"
        budget = "report"

        [[proxy.routes]]
        listen = "127.0.0.1:7002"
        prefix = "/export"
        host = "Admin.Internal"
        budget = "admin_export"
        "#,
    )
    .unwrap();
    assert_eq!(file.listeners().len(), 1);
    let l = &file.listeners()[0];
    assert_eq!(l.default_budget(), "search");
    let order: Vec<_> = l.rules().iter().map(|r| r.budget()).collect();
    assert_eq!(order, ["report", "admin_export", "export"]);
    assert_eq!(l.budget_for("/export/report/1", None), "report");
    assert_eq!(
        l.budget_for("/export/1", Some("admin.internal:7002")),
        "admin_export"
    );
    assert_eq!(l.budget_for("/export/1", Some("api.internal")), "export");
    assert_eq!(l.budget_for("/export?all=1", None), "export");
    assert_eq!(l.budget_for("/exports", None), "search");
    assert_eq!(
        file.route("export").unwrap().listen(),
        "127.0.0.1:7002".parse().unwrap()
    );
    // A listener that only routes name takes its catch-all route as the default.
    let file = ProxyFile::from_toml_str(
        r#"
        [budgets.get]
        max_concurrent = 16
        upstream = "http://127.0.0.1:7070"

        [budgets.export]
        max_concurrent = 2
        upstream = "http://127.0.0.1:7070"

        [[proxy.routes]]
        listen = "127.0.0.1:7005"
        prefix = "/"
        budget = "get"

        [[proxy.routes]]
        listen = "127.0.0.1:7005"
        prefix = "/pkg.Records/Export"
        budget = "export"
        "#,
    )
    .unwrap();
    let l = &file.listeners()[0];
    assert_eq!(l.default_budget(), "get");
    assert_eq!(l.budget_for("/pkg.Records/Export", None), "export");
    assert_eq!(l.budget_for("/pkg.Records/Get", None), "get");
}

#[test]
fn route_mistakes_name_their_path() {
    let base = "[budgets.a]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:7002\"\n\n[budgets.b]\nmax_concurrent = 1\nupstream = \"http://x\"\n\n[budgets.plain]\nmax_concurrent = 1\n\n";
    let route = |body: &str| format!("[[proxy.routes]]\n{body}\n");
    let ok = "listen = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"";
    let cases = [
        (
            route(ok) + &route(ok),
            "proxy.routes[1]: the same listen, host and prefix as proxy.routes[0]",
        ),
        (
            route("listen = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"nope\""),
            "proxy.routes[0].budget: \"nope\" is not a proxied budget",
        ),
        (
            route(ok) + &route("listen = \"127.0.0.1:7002\"\nprefix = \"/p\"\nbudget = \"plain\""),
            "proxy.routes[1].budget: \"plain\" is not a proxied budget",
        ),
        (
            route("listen = \"127.0.0.1:7002\"\nprefix = \"b\"\nbudget = \"b\""),
            "proxy.routes[0].prefix: must be a path starting with /",
        ),
        (
            route("listen = \"127.0.0.1:7002\"\nbudget = \"b\""),
            "proxy.routes[0].prefix: missing",
        ),
        (
            route("prefix = \"/b\"\nbudget = \"b\""),
            "proxy.routes[0].listen: missing",
        ),
        (
            route("listen = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"\nweight = 2"),
            "proxy.routes[0].weight: unknown key",
        ),
        (
            route("listen = \"127.0.0.1:7009\"\nprefix = \"/b\"\nbudget = \"b\""),
            "proxy.routes[0].listen: no budget listens on 127.0.0.1:7009",
        ),
        (
            String::new(),
            "budgets.b.listen: missing (a budget with an upstream needs the address to listen on",
        ),
        (
            "[proxy]\nroutes = 3\n".to_string(),
            "proxy.routes: must be a list of [[proxy.routes]] tables",
        ),
    ];
    for (extra, expected) in cases {
        let text = format!("{base}{extra}");
        let err = ProxyFile::from_toml_str(&text).unwrap_err().to_string();
        assert!(
            err.contains(expected),
            "{extra}\n=> {err}\nwanted {expected}"
        );
    }
}

/// A catch-all route on a listener that a budget's own `listen` names would leave that budget
/// unreachable; the admin address is no route's; client limits and the drain have bounds; a
/// listener's budget is not called `admin` (the admin listener's metrics label).
#[test]
fn a_shadowed_default_the_admin_address_and_absurd_client_limits_are_refused() {
    let base = "[budgets.a]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:7002\"\n\n[budgets.b]\nmax_concurrent = 1\nupstream = \"http://x\"\n\n";
    let cases = [
        (
            format!("{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/\"\nbudget = \"b\"\n"),
            "proxy.routes[0].prefix: \"/\" takes every request to 127.0.0.1:7002, whose default is budget \"a\"",
        ),
        (
            format!("[proxy]\nadmin = \"127.0.0.1:7009\"\n\n{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7009\"\nprefix = \"/\"\nbudget = \"b\"\n"),
            "proxy.admin: 127.0.0.1:7009 is already the listen address of a [[proxy.routes]] entry",
        ),
        (
            format!("[proxy]\nmax_connections = 100000000000\n\n{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"\n"),
            "proxy.max_connections: must be at most 10000000",
        ),
        (
            format!("[proxy]\nidle_timeout = \"1000years\"\n\n{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"\n"),
            "proxy.idle_timeout: must be at most 7 days",
        ),
        (
            format!("[proxy]\ndrain = \"8d\"\n\n{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"\n"),
            "proxy.drain: must be at most 7 days",
        ),
        (
            format!("[proxy]\nidle_timeout = \"1ns\"\n\n{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"\n"),
            "proxy.idle_timeout: must be at least 1ms, got string \"1ns\"",
        ),
        (
            format!("[proxy]\nfirst_byte_timeout = \"500us\"\nhttp2_keepalive_timeout = \"999us\"\n\n{base}[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/b\"\nbudget = \"b\"\n"),
            "proxy.first_byte_timeout: must be at least 1ms, got string \"500us\"",
        ),
        (
            "[budgets.admin]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:7002\"\n".to_string(),
            "budgets.admin: a budget that names a listener may not be called \"admin\"",
        ),
    ];
    for (text, expected) in cases {
        let err = ProxyFile::from_toml_str(&text).unwrap_err().to_string();
        assert!(
            err.contains(expected),
            "{text}\n=> {err}\nwanted {expected}"
        );
    }
}

/// A route on an address no budget listens on, and with no catch-all there, is the one mistake
/// said: the budget it names is named by a route, and not told it has no listen address.
#[test]
fn a_route_on_a_listener_without_a_default_is_the_only_mistake_said() {
    let err = refused(
        "[budgets.a]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:9000\"\nlisten = \"127.0.0.1:28030\"\n\n\
         [budgets.b]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:9001\"\n\n\
         [[proxy.routes]]\nlisten = \"127.0.0.1:28031\"\nprefix = \"/x\"\nbudget = \"b\"\n",
    );
    assert!(
        err.contains("proxy.routes[0].listen: no budget listens on 127.0.0.1:28031"),
        "{err}"
    );
    assert!(!err.contains("budgets.b.listen"), "{err}");
}

/// A budget whose upstream is one of the proxy's own listeners is refused: each request would
/// come back to the proxy until its client gave up.
#[test]
fn an_upstream_that_is_the_proxys_own_listener_is_refused() {
    let err = refused(
        "[budgets.a]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:28040\"\nlisten = \"127.0.0.1:28040\"\n",
    );
    assert!(
        err.contains("budgets.a.upstream: http://127.0.0.1:28040 is this proxy's own listener"),
        "{err}"
    );
    let err = refused(
        "[budgets.a]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:9000\"\nlisten = \"127.0.0.1:28041\"\n\n\
         [budgets.b]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:28041\"\nlisten = \"127.0.0.1:28042\"\n",
    );
    assert!(err.contains("budgets.b.upstream"), "{err}");
    // Another host on the same port is not this proxy.
    assert!(ProxyFile::from_toml_str(
        "[budgets.a]\nmax_concurrent = 1\nupstream = \"http://10.0.0.1:28043\"\nlisten = \"127.0.0.1:28043\"\n",
    )
    .is_ok());
}
