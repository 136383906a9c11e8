//! The `[[proxy.routes]]` entries, and the listeners they and the budgets' `listen` keys make:
//! one budget per listener by default, others chosen by path prefix (and host).

use std::net::SocketAddr;

use inflight::config::budget_path;
use inflight::config::value::{short, shown, Value};
use inflight::ConfigError;

use super::{Listener, RouteRule};

/// Keys of one `[[proxy.routes]]` entry.
const RULE_FIELDS: &[&str] = &["listen", "prefix", "host", "budget"];

/// The longest prefix taken: a path prefix, or a gRPC method's `/package.Service/Method`.
const MAX_PREFIX: usize = 1024;

/// The entries of `proxy.routes`, each checked on its own; `address` reads a listen address.
pub(super) fn rules(
    value: Option<&Value>,
    address: &dyn Fn(&str, &Value) -> Result<SocketAddr, ConfigError>,
) -> (Vec<(usize, RouteRule)>, Vec<ConfigError>) {
    let mut errors = Vec::new();
    let Some(value) = value else {
        return (Vec::new(), errors);
    };
    let Value::Array(entries) = value else {
        errors.push(ConfigError::invalid(
            "proxy.routes",
            format!(
                "must be a list of [[proxy.routes]] tables, got {}",
                shown(value)
            ),
        ));
        return (Vec::new(), errors);
    };
    let mut rules = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("proxy.routes[{i}]");
        let Some(table) = entry.as_table() else {
            errors.push(ConfigError::invalid(
                &at,
                format!("must be a table, got {}", shown(entry)),
            ));
            continue;
        };
        let mut wrong = Vec::new();
        for key in table.keys() {
            if !RULE_FIELDS.contains(&key.as_str()) {
                wrong.push(ConfigError::invalid(
                    format!("{at}.{key}"),
                    format!("unknown key (expected one of {})", RULE_FIELDS.join(", ")),
                ));
            }
        }
        let text = |key: &str, example: &str| -> Result<Option<String>, ConfigError> {
            match table.get(key) {
                None => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
                Some(other) => Err(ConfigError::invalid(
                    format!("{at}.{key}"),
                    format!("must be a string like {example}, got {}", shown(other)),
                )),
            }
        };
        let listen = match table.get("listen") {
            None => Err(ConfigError::invalid(
                format!("{at}.listen"),
                "missing (the address whose requests this route picks from, e.g. \"127.0.0.1:7002\")",
            )),
            Some(v) => address(&format!("{at}.listen"), v),
        };
        let budget = text("budget", "\"export\"").and_then(|b| {
            b.ok_or_else(|| {
                ConfigError::invalid(
                    format!("{at}.budget"),
                    "missing (the budget this route's requests go to)",
                )
            })
        });
        let prefix = text("prefix", "\"/export\"").and_then(|p| {
            let p = p.ok_or_else(|| {
                ConfigError::invalid(
                    format!("{at}.prefix"),
                    "missing (the path prefix, e.g. \"/export\", or \"/\" for every path)",
                )
            })?;
            if !p.starts_with('/') || p.len() > MAX_PREFIX || p.contains(['?', '#', ' ']) {
                return Err(ConfigError::invalid(
                    format!("{at}.prefix"),
                    format!(
                        "must be a path starting with / (at most {MAX_PREFIX} characters, no query), got {}",
                        short(&p)
                    ),
                ));
            }
            Ok(p)
        });
        let host = text("host", "\"api.internal\"").and_then(|h| {
            h.map(|h| {
                let valid = h
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
                if valid {
                    Ok(h.to_ascii_lowercase())
                } else {
                    Err(ConfigError::invalid(
                        format!("{at}.host"),
                        format!(
                            "must be a host name like \"api.internal\" (no port), got {}",
                            short(&h)
                        ),
                    ))
                }
            })
            .transpose()
        });
        match (listen, budget, prefix, host, wrong.is_empty()) {
            (Ok(listen), Ok(budget), Ok(prefix), Ok(host), true) => rules.push((
                i,
                RouteRule {
                    listen,
                    prefix,
                    host,
                    budget,
                },
            )),
            (listen, budget, prefix, host, _) => {
                errors.extend(wrong);
                errors.extend(listen.err());
                errors.extend(budget.err());
                errors.extend(prefix.err());
                errors.extend(host.err());
            }
        }
    }
    (rules, errors)
}

/// The listeners: one per budget with a `listen` key (its default), then one per address only
/// routes name (its default: the route with prefix `/` and no host). `proxied` are the budgets
/// with an upstream, `own` those of them with a `listen` of their own.
pub(super) fn listeners(
    rules: Vec<(usize, RouteRule)>,
    proxied: &[String],
    own: &[(String, SocketAddr)],
) -> (Vec<Listener>, Vec<ConfigError>) {
    let mut errors = Vec::new();
    let mut listeners: Vec<Listener> = own
        .iter()
        .map(|(name, addr)| Listener {
            addr: *addr,
            default: name.clone(),
            rules: Vec::new(),
        })
        .collect();
    let mut seen: Vec<(usize, SocketAddr, Option<String>, String)> = Vec::new();
    let mut orphans: Vec<(usize, RouteRule)> = Vec::new();
    for (i, rule) in rules {
        let at = format!("proxy.routes[{i}]");
        if !proxied.contains(&rule.budget) {
            errors.push(ConfigError::invalid(
                format!("{at}.budget"),
                format!(
                    "{} is not a proxied budget (it needs a [budgets.{0}] table with upstream)",
                    short(&rule.budget)
                ),
            ));
            continue;
        }
        if let Some((j, ..)) = seen
            .iter()
            .find(|(_, l, h, p)| *l == rule.listen && *h == rule.host && *p == rule.prefix)
        {
            errors.push(ConfigError::invalid(
                &at,
                format!(
                    "the same listen, host and prefix as proxy.routes[{j}]: one of them would never be reached"
                ),
            ));
            continue;
        }
        seen.push((i, rule.listen, rule.host.clone(), rule.prefix.clone()));
        let matching: Vec<usize> = listeners
            .iter()
            .enumerate()
            .filter(|(_, l)| l.addr == rule.listen)
            .map(|(k, _)| k)
            .collect();
        match matching.as_slice() {
            [k] if rule.prefix == "/" && rule.host.is_none() => errors.push(ConfigError::invalid(
                format!("{at}.prefix"),
                format!(
                    "\"/\" takes every request to {}, whose default is budget {}: that budget would never be reached (drop its listen to make {} the default)",
                    rule.listen,
                    short(&listeners[*k].default),
                    short(&rule.budget)
                ),
            )),
            [k] => listeners[*k].rules.push(rule),
            [] => orphans.push((i, rule)),
            _ => errors.push(ConfigError::invalid(
                format!("{at}.listen"),
                format!(
                    "{} is the listen address of several budgets (port 0 picks a port each): give the listener a fixed port",
                    rule.listen
                ),
            )),
        }
    }
    // Budgets named by routes refused below: their route's mistake is said, not theirs.
    let mut named = Vec::new();
    // Addresses only routes name: the catch-all route is the default.
    while let Some((i, first)) = orphans.first().cloned() {
        let addr = first.listen;
        let (mine, rest): (Vec<_>, Vec<_>) =
            orphans.into_iter().partition(|(_, r)| r.listen == addr);
        orphans = rest;
        let default = mine
            .iter()
            .find(|(_, r)| r.prefix == "/" && r.host.is_none())
            .map(|(_, r)| r.budget.clone());
        let Some(default) = default else {
            named.extend(mine.iter().map(|(_, r)| r.budget.clone()));
            errors.push(ConfigError::invalid(
                format!("proxy.routes[{i}].listen"),
                format!(
                    "no budget listens on {addr} and no route there has prefix = \"/\": requests that match no route would have no budget (add listen = \"{addr}\" to the default budget)"
                ),
            ));
            continue;
        };
        listeners.push(Listener {
            addr,
            default,
            rules: mine
                .into_iter()
                .filter(|(_, r)| !(r.prefix == "/" && r.host.is_none()))
                .map(|(_, r)| r)
                .collect(),
        });
    }
    for listener in &mut listeners {
        // Longest prefix first; at equal length, a rule with a host first.
        listener
            .rules
            .sort_by_key(|r| (std::cmp::Reverse(r.prefix.len()), r.host.is_none()));
    }
    for name in proxied {
        let reached = named.contains(name)
            || listeners
                .iter()
                .any(|l| l.default == *name || l.rules.iter().any(|r| r.budget == *name));
        if !reached {
            errors.push(ConfigError::invalid(
                format!("{}.listen", budget_path(name)),
                "missing (a budget with an upstream needs the address to listen on, e.g. \"127.0.0.1:7002\", or a [[proxy.routes]] entry that names it)",
            ));
        }
    }
    (listeners, errors)
}
