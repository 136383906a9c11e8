//! The fleet over TLS with an ACL user, against a real `redis-server` that listens on a TLS port
//! only (no plain port) and lets in no one but its user: two fleets share one limit through it
//! with `rediss://user:password@...` and a CA file, and every way of getting the connection
//! wrong (no TLS, a wrong password, no login, no CA file, the wrong CA) is refused with an
//! error naming the server without its password, never a silent local permit.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use inflight::{AcquireError, Budget};
use inflight_redis::{Fail, RedisFleet, RedisStore};
use support::ms;
use support::tls::{TlsRedisServer, PASSWORD, USER};

/// A password the server does not know.
const WRONG_PASSWORD: &str = "n0t-the-pw";

/// The longest any acquire or status here may take: far above a loopback TLS handshake.
const BOUND: Duration = Duration::from_secs(10);

fn fleet(url: &str, ca: Option<&Path>) -> RedisFleet {
    let mut builder = RedisFleet::builder(url)
        .lease(ms(5000))
        .op_timeout(ms(2000))
        .retry_after(ms(200));
    if let Some(ca) = ca {
        builder = builder.ca_file(ca);
    }
    builder.build().unwrap()
}

fn budget(limit: usize, timeout: Duration, store: &RedisStore) -> Budget {
    Budget::builder("records")
        .max_concurrent(limit)
        .permit_timeout(timeout)
        .store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

/// What the fleet's Redis holds of `records` now, read over the fleet's own connection.
async fn status(fleet: &RedisFleet) -> inflight_redis::FleetStatus {
    tokio::time::timeout(BOUND, fleet.status("records"))
        .await
        .expect("status answers within its round-trip timeout")
        .unwrap_or_else(|e| panic!("status over TLS: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_fleets_over_tls_with_an_acl_user_share_one_limit() {
    let Some(server) = TlsRedisServer::start() else {
        return;
    };
    let url = server.url(Some((USER, PASSWORD)));
    let ca = server.ca_file();
    // Two replicas: their own fleets (their own TLS connections), one fleet limit of 2.
    let a = fleet(&url, Some(&ca));
    let b = fleet(&url, Some(&ca));
    let shown = format!("rediss://{USER}:***@127.0.0.1:{}", server.port());
    assert_eq!(a.address(), shown, "the address hides the password");
    for text in [format!("{a:?}"), format!("{b:?}")] {
        assert!(!text.contains(PASSWORD), "Debug hides the password: {text}");
        assert!(text.contains(&shown), "{text}");
    }
    let builder = RedisFleet::builder(&url).ca_file(&ca);
    let text = format!("{builder:?}");
    assert!(
        !text.contains(PASSWORD),
        "the builder's Debug hides it: {text}"
    );
    let a_store = a.store(2, Fail::Closed);
    let b_store = b.store(2, Fail::Closed);
    let a_records = budget(2, ms(300), &a_store);

    let mut held = Vec::new();
    for _ in 0..2 {
        let permit = tokio::time::timeout(BOUND, a_records.acquire())
            .await
            .expect("granted within the bound")
            .unwrap_or_else(|e| panic!("a fleet permit over TLS: {e}"));
        let lease = permit.lease().expect("a fleet lease");
        assert!(!lease.is_lost());
        held.push(permit);
    }
    assert_eq!(a.topology(), Some("standalone"), "it connected");
    let now = status(&b).await;
    assert_eq!(
        (now.holders, now.local_registered, now.role.as_str()),
        (2, 0, "master"),
        "both leases are held in Redis, read by the other fleet: {now:?}"
    );
    assert_eq!(a_store.snapshot().held, 2);

    // Full across the fleet: the other replica's caller waits its deadline out, and so does a
    // third caller of the first replica.
    let b_short = budget(2, ms(300), &b_store);
    let start = tokio::time::Instant::now();
    let err = tokio::time::timeout(BOUND, b_short.acquire())
        .await
        .expect("refused within the bound")
        .unwrap_err();
    assert_eq!(err, AcquireError::PermitTimeout, "{err}");
    assert!(start.elapsed() >= ms(290), "waited its whole deadline");
    let a_third = budget(3, ms(300), &a_store);
    let err = tokio::time::timeout(BOUND, a_third.acquire())
        .await
        .expect("refused within the bound")
        .unwrap_err();
    assert_eq!(err, AcquireError::PermitTimeout, "{err}");

    // A waiter of the other replica gets in once one lease is given back.
    let b_records = budget(2, Duration::from_secs(8), &b_store);
    let waiter = tokio::spawn({
        let b_records = b_records.clone();
        async move { b_records.acquire_owned().await }
    });
    tokio::time::sleep(ms(300)).await;
    assert!(!waiter.is_finished(), "the fleet is full");
    let now = status(&a).await;
    assert_eq!((now.holders, now.waiters), (2, 1), "{now:?}");
    held.pop();
    let got = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("a release lets the waiter in well before its deadline")
        .unwrap()
        .unwrap_or_else(|e| panic!("the waiter's permit over TLS: {e}"));
    assert!(!got.lease().expect("a fleet lease").is_lost());
    let now = status(&a).await;
    assert_eq!(
        (now.holders, now.local_registered),
        (2, 0),
        "one lease of each replica: {now:?}"
    );
    assert_eq!((a_store.snapshot().held, b_store.snapshot().held), (1, 1));

    drop(got);
    held.clear();
    let start = tokio::time::Instant::now();
    loop {
        let now = status(&a).await;
        if now.holders == 0 {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "the releases reached Redis: {now:?}"
        );
        tokio::time::sleep(ms(20)).await;
    }
    for (name, store, acquired, timeouts) in [("a", &a_store, 2, 1), ("b", &b_store, 1, 1)] {
        let s = store.snapshot();
        assert_eq!(
            (
                s.acquired,
                s.timeouts,
                s.fallbacks,
                s.unavailable,
                s.redis_down
            ),
            (acquired, timeouts, 0, 0, false),
            "replica {name}: every permit a fleet lease, Redis never down: {s:?}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// An acquire through a fleet on `url` (with the CA file `ca`) under `Fail::Closed`: it must be
/// refused as unavailable, with no permit from anywhere, and the fleet's status must fail too.
/// The refusal's text, which never shows a password.
async fn refused(url: &str, ca: Option<&Path>, shown: &str) -> String {
    let fleet = fleet(url, ca);
    assert_eq!(fleet.address(), shown);
    let store = fleet.store(2, Fail::Closed);
    let records = budget(2, Duration::from_secs(3), &store);
    let result = tokio::time::timeout(BOUND, records.acquire())
        .await
        .unwrap_or_else(|_| panic!("{url}: refused within the bound"));
    let err = match result {
        Ok(_) => panic!("{url}: a permit, where the connection must fail"),
        Err(AcquireError::Unavailable(e)) => e.to_string(),
        Err(e) => panic!("{url}: refused, but not as unavailable: {e:?}"),
    };
    let s = store.snapshot();
    assert_eq!(
        (s.acquired, s.held, s.local_held, s.fallbacks, s.unavailable),
        (0, 0, 0, 0, 1),
        "{url}: no lease and no local permit: {s:?}"
    );
    assert!(err.contains("fleet budget \"records\""), "{err}");
    assert!(err.contains(shown), "names the server: {err}");
    let status = tokio::time::timeout(BOUND, fleet.status("records"))
        .await
        .unwrap_or_else(|_| panic!("{url}: status answers within the bound"));
    let status = match status {
        Ok(s) => panic!("{url}: a status, where the connection must fail: {s:?}"),
        Err(e) => e.to_string(),
    };
    for text in [&err, &status] {
        for secret in [PASSWORD, WRONG_PASSWORD] {
            assert!(
                !text.contains(secret),
                "the password is never shown: {text}"
            );
        }
    }
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_fleet_refuses_plain_text_a_wrong_login_and_a_certificate_it_cannot_trust() {
    let Some(server) = TlsRedisServer::start() else {
        return;
    };
    let ca = server.ca_file();
    let port = server.port();
    let good = server.url(Some((USER, PASSWORD)));
    let shown = format!("rediss://{USER}:***@127.0.0.1:{port}");

    // The control: the right URL and CA get a fleet lease, so each refusal below is down to
    // the one thing it changes.
    let control = fleet(&good, Some(&ca));
    let records = budget(2, ms(3000), &control.store(2, Fail::Closed));
    let permit = tokio::time::timeout(BOUND, records.acquire())
        .await
        .expect("granted within the bound")
        .unwrap_or_else(|e| panic!("a fleet permit over TLS: {e}"));
    assert!(permit.lease().is_some());
    drop(permit);
    control.shutdown().await;

    // No TLS: the server has no plain port, so plain text to its port is not answered.
    refused(
        &format!("redis://{USER}:{PASSWORD}@127.0.0.1:{port}"),
        None,
        &format!("redis://{USER}:***@127.0.0.1:{port}"),
    )
    .await;

    // A wrong password, and no login at all.
    let err = refused(&server.url(Some((USER, WRONG_PASSWORD))), Some(&ca), &shown).await;
    assert!(err.contains("WRONGPASS"), "{err}");
    let err = refused(
        &server.url(None),
        Some(&ca),
        &format!("rediss://127.0.0.1:{port}"),
    )
    .await;
    assert!(err.contains("NOAUTH"), "{err}");

    // A certificate the client cannot trust: no CA file (the system's roots), or an unrelated
    // authority's.
    let err = refused(&good, None, &shown).await;
    assert!(err.contains("certificate"), "{err}");
    let err = refused(&good, Some(&server.other_ca_file()), &shown).await;
    assert!(
        err.contains("invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
}
