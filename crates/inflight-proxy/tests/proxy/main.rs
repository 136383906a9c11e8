//! End-to-end tests of the proxy against real upstreams on 127.0.0.1: one binary, a module per
//! area, helpers in `support`, `scripted` (an upstream that writes answers byte by byte) and
//! `fetched` (a client's whole answer, and the bound on every wait).

mod backpressure;
mod classes;
mod clients;
mod config;
mod connections;
mod fetched;
mod fleet;
mod forward;
mod framing;
mod grpc;
mod http2;
mod operations;
mod page;
mod ported_client;
mod ported_reverse_proxy;
mod ported_server;
mod refusals;
mod release;
mod routes;
mod scripted;
mod support;
mod tls;
mod tonic;
mod wire;
