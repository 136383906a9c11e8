//! `N` uncontended acquire + release, through a `Budget` or through tower's `ConcurrencyLimit`,
//! for counting the instructions each costs, which, unlike times, do not move with the load on
//! the machine:
//!
//! ```text
//! cargo build --release -p inflight --example permit_loop
//! for n in 100000 200000; do
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!         target/release/examples/permit_loop budget $n 2>&1 | grep Collected
//! done
//! ```
//!
//! The difference between the two counts, divided by 100,000, is one acquire + release (the
//! runtime's start and the rest cancel out). `tower` in place of `budget` gives tower's.

use std::future::{ready, Ready};
use std::hint::black_box;

use inflight::{Budget, BudgetConfig};
use tower::limit::ConcurrencyLimit;
use tower::{service_fn, Service, ServiceExt};

type Noop = tower::util::ServiceFn<fn(()) -> Ready<Result<(), ()>>>;

#[inline(never)]
async fn budget(budget: &Budget, n: u64) {
    for _ in 0..n {
        drop(black_box(budget.acquire().await.unwrap()));
    }
}

#[inline(never)]
async fn tower(svc: &mut ConcurrencyLimit<Noop>, n: u64) {
    for _ in 0..n {
        svc.ready().await.unwrap();
        svc.call(()).await.unwrap();
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(which), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: permit_loop budget|tower N");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        match which.as_str() {
            "budget" => {
                let b = Budget::new("loop", BudgetConfig::new(8)).unwrap();
                budget(&b, n).await;
            }
            "tower" => {
                let f: fn(()) -> Ready<Result<(), ()>> = |_| ready(Ok(()));
                let mut svc = ConcurrencyLimit::new(service_fn(f), 8);
                tower(&mut svc, n).await;
            }
            other => {
                eprintln!("permit_loop: {other:?} is neither budget nor tower");
                std::process::exit(2);
            }
        }
    });
}
