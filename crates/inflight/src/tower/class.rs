//! [`RequestClass`] and [`ClassOf`]: which of a budget's priority classes a request is in.

use std::fmt;
use std::sync::Arc;

/// The priority class a request asks for, by name: one of its budget's
/// [`Classes`](crate::Classes). A name the budget has no class for is its default class.
///
/// Insert it as an `http::Request` extension in a layer ahead of the budget's (one that knows
/// who is calling), and build the budget's layer with
/// [`BudgetLayer::class_from_extension`](super::BudgetLayer::class_from_extension); or return it
/// from the function given to [`BudgetLayer::class_by`](super::BudgetLayer::class_by).
///
/// ```
/// use inflight::tower::RequestClass;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(RequestClass::new("interactive"));
/// assert_eq!(request.extensions().get::<RequestClass>().unwrap().name(), "interactive");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestClass(Arc<str>);

impl RequestClass {
    /// The class named `name`.
    pub fn new(name: impl Into<Arc<str>>) -> RequestClass {
        RequestClass(name.into())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RequestClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestClass").field(&&*self.0).finish()
    }
}

impl From<&str> for RequestClass {
    fn from(name: &str) -> RequestClass {
        RequestClass::new(name)
    }
}

impl From<String> for RequestClass {
    fn from(name: String) -> RequestClass {
        RequestClass::new(name)
    }
}

/// Which class a request is in, for a [`BudgetService`](super::BudgetService); `None`: the
/// budget's default class.
///
/// Implemented by [`NoClass`] (the default: every request in the default class), by
/// [`FromExtension`] (the request's [`RequestClass`] extension), and by any
/// `Fn(&Req) -> Option<R>` where `R: Into<RequestClass>` (a `&'static str`, a `String`, a
/// `RequestClass`).
pub trait ClassOf<Req> {
    /// The class of `request`.
    fn class_of(&self, request: &Req) -> Option<RequestClass>;
}

/// Every request in its budget's default class: what a [`BudgetLayer`](super::BudgetLayer)
/// does unless told where the class comes from.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoClass;

impl<Req> ClassOf<Req> for NoClass {
    fn class_of(&self, _: &Req) -> Option<RequestClass> {
        None
    }
}

/// The class an `http::Request` carries as a [`RequestClass`] extension; a request without
/// one is in the default class.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromExtension;

impl<B> ClassOf<http::Request<B>> for FromExtension {
    fn class_of(&self, request: &http::Request<B>) -> Option<RequestClass> {
        request.extensions().get::<RequestClass>().cloned()
    }
}

impl<Req, F, R> ClassOf<Req> for F
where
    F: Fn(&Req) -> Option<R>,
    R: Into<RequestClass>,
{
    fn class_of(&self, request: &Req) -> Option<RequestClass> {
        self(request).map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class<K: ClassOf<Req>, Req>(k: &K, request: &Req) -> Option<String> {
        k.class_of(request).map(|c| c.name().to_string())
    }

    #[test]
    fn each_source_finds_its_class() {
        let mut tagged = http::Request::new(());
        tagged
            .extensions_mut()
            .insert(RequestClass::new("interactive"));
        let plain = http::Request::new(());
        assert_eq!(
            class(&FromExtension, &tagged).as_deref(),
            Some("interactive")
        );
        assert_eq!(class(&FromExtension, &plain), None);
        assert_eq!(class(&NoClass, &tagged), None);
        assert_eq!(class(&NoClass, &7u32), None);
        let by_path = |r: &http::Request<()>| (r.uri().path() == "/").then_some("batch");
        assert_eq!(class(&by_path, &plain).as_deref(), Some("batch"));
        let by_number = |n: &u32| Some(format!("tier{n}"));
        assert_eq!(class(&by_number, &2).as_deref(), Some("tier2"));
    }
}
