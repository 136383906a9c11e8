//! [`Classes`]: the priority classes of one budget, their weights, their own permit deadlines,
//! the default class and whether priority is strict.

use std::sync::Arc;
use std::time::Duration;

/// The most classes one budget takes.
pub const MAX_CLASSES: usize = 16;

/// The priority classes of a [`Budget`](crate::Budget): who goes first when its permits are all
/// held.
///
/// Grants go to the classes that have waiters in proportion to their weights (weighted fair
/// queuing), first come first served within a class; a class with no waiters leaves its share to
/// the others. With [`strict`](Classes::strict), the heaviest class with a waiter always goes
/// first. A call that names no class (or a class the budget does not have) is in the default
/// class: the one named by [`default_class`](Classes::default_class), else the lightest class
/// (the last declared of the lightest).
///
/// ```
/// use std::time::Duration;
/// use inflight::{BudgetConfig, Classes};
///
/// let classes = Classes::new()
///     .class("interactive", 4)
///     .class("batch", 1)
///     .class_permit_timeout("interactive", Duration::from_millis(50))
///     .default_class("batch");
/// let records = BudgetConfig::new(6).classes(classes);
/// let classes = records.priority_classes().unwrap();
/// assert_eq!(classes.default_name(), "batch");
/// assert_eq!(classes.get("interactive").unwrap().weight(), 4);
/// ```
///
/// When every permit is held, a caller of a heavier class goes before lighter ones that queued
/// earlier, and takes the place of the newest of them when the queue is full:
///
/// ```
/// use inflight::{AcquireError, Budget, BudgetConfig, Classes};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let classes = Classes::new().class("interactive", 4).class("batch", 1);
/// let api = Budget::new("api", BudgetConfig::new(1).max_queued(1).classes(classes)).unwrap();
/// let held = api.acquire_owned_in("batch").await.unwrap();
/// let batch = tokio::spawn({
///     let api = api.clone();
///     async move { api.acquire_in("batch").await.map(drop) }
/// });
/// tokio::task::yield_now().await; // batch waits in the only place
/// let interactive = tokio::spawn({
///     let api = api.clone();
///     async move { api.acquire_in("interactive").await.map(drop) }
/// });
/// tokio::task::yield_now().await;
/// assert!(matches!(batch.await.unwrap(), Err(AcquireError::Evicted { .. })));
/// drop(held);
/// interactive.await.unwrap().unwrap();
/// let s = api.snapshot();
/// assert_eq!((s.classes[0].admitted, s.classes[1].evicted), (1, 1));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Classes {
    pub(crate) classes: Vec<Class>,
    pub(crate) default: Option<Arc<str>>,
    pub(crate) strict: bool,
}

/// One priority class of a budget: its name, weight and own permit deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    pub(crate) name: Arc<str>,
    pub(crate) weight: u32,
    pub(crate) permit_timeout: Option<Duration>,
}

impl Class {
    /// The class's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its weight: its share of the grants, against the other classes with waiters.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Its own permit deadline, if it has one (else the budget's `permit_timeout`).
    pub fn permit_timeout(&self) -> Option<Duration> {
        self.permit_timeout
    }
}

impl Classes {
    /// No classes yet.
    pub fn new() -> Classes {
        Classes::default()
    }

    /// Adds a class with a weight (at least 1); a name given again replaces its weight.
    pub fn class(mut self, name: &str, weight: u32) -> Classes {
        match self.classes.iter_mut().find(|c| &*c.name == name) {
            Some(class) => class.weight = weight,
            None => self.classes.push(Class {
                name: Arc::from(name),
                weight,
                permit_timeout: None,
            }),
        }
        self
    }

    /// Gives a class its own permit deadline, replacing the budget's `permit_timeout` for it.
    /// A class not added yet is added with weight 1.
    pub fn class_permit_timeout(mut self, name: &str, timeout: Duration) -> Classes {
        if !self.classes.iter().any(|c| &*c.name == name) {
            self = self.class(name, 1);
        }
        if let Some(class) = self.classes.iter_mut().find(|c| &*c.name == name) {
            class.permit_timeout = Some(timeout);
        }
        self
    }

    /// Names the class of a call that names none.
    pub fn default_class(mut self, name: &str) -> Classes {
        self.default = Some(Arc::from(name));
        self
    }

    /// Strict priority: the heaviest class with a waiter always goes first (weights then only
    /// order the classes). Default: weighted fair queuing.
    pub fn strict(mut self, strict: bool) -> Classes {
        self.strict = strict;
        self
    }

    /// The classes, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = &Class> {
        self.classes.iter()
    }

    /// How many classes there are.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The class of that name.
    pub fn get(&self, name: &str) -> Option<&Class> {
        self.classes.iter().find(|c| &*c.name == name)
    }

    /// Where the class of that name is in [`iter`](Classes::iter)'s order.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| &*c.name == name)
    }

    /// The default class's name: the one named, else the lightest (the last declared of the
    /// lightest); empty when there are no classes.
    pub fn default_name(&self) -> &str {
        if let Some(name) = &self.default {
            return name;
        }
        self.default_index()
            .map(|i| &*self.classes[i].name)
            .unwrap_or("")
    }

    /// Where the default class is in [`iter`](Classes::iter)'s order; `None` when there are no
    /// classes (or the named default is not one of them, which validation refuses).
    pub fn default_index(&self) -> Option<usize> {
        match &self.default {
            Some(name) => self.index_of(name),
            None => {
                let lightest = self.classes.iter().map(|c| c.weight).min()?;
                self.classes.iter().rposition(|c| c.weight == lightest)
            }
        }
    }

    /// Whether priority is strict.
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// Checks the classes: at least one and at most [`MAX_CLASSES`], names not blank, weights
    /// at least 1, deadlines above zero, the default one of them. `Err` names the field and
    /// what is wrong.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.classes.is_empty() {
            return Err((
                "classes",
                "must name at least one class, e.g. { interactive = 4, batch = 1 }".into(),
            ));
        }
        if self.classes.len() > MAX_CLASSES {
            return Err((
                "classes",
                format!("at most {MAX_CLASSES} classes, got {}", self.classes.len()),
            ));
        }
        for class in &self.classes {
            if class.name.trim().is_empty() {
                return Err(("classes", "a class name must not be empty or blank".into()));
            }
            if class.weight == 0 {
                return Err((
                    "classes",
                    format!("class {:?}: weight must be at least 1, got 0", &*class.name),
                ));
            }
            if class.weight > MAX_WEIGHT {
                return Err((
                    "classes",
                    format!(
                        "class {:?}: weight must be at most {MAX_WEIGHT}, got {}",
                        &*class.name, class.weight
                    ),
                ));
            }
            if class.permit_timeout == Some(Duration::ZERO) {
                return Err((
                    "classes",
                    format!(
                        "class {:?}: permit_timeout must be greater than zero, got 0s",
                        &*class.name
                    ),
                ));
            }
        }
        if let Some(name) = &self.default {
            if self.index_of(name).is_none() {
                let names: Vec<&str> = self.classes.iter().map(|c| &*c.name).collect();
                return Err((
                    "default_class",
                    format!("{name:?} is not one of the classes ({})", names.join(", ")),
                ));
            }
        }
        Ok(())
    }
}

/// The heaviest weight a class takes.
pub const MAX_WEIGHT: u32 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_named_class_else_the_lightest() {
        let c = Classes::new().class("interactive", 4).class("batch", 1);
        assert_eq!(c.default_name(), "batch");
        assert_eq!(
            c.clone().default_class("interactive").default_name(),
            "interactive"
        );
        let tie = Classes::new().class("a", 1).class("b", 1);
        assert_eq!(tie.default_name(), "b");
    }

    #[test]
    fn check_names_what_is_wrong() {
        assert_eq!(Classes::new().check().unwrap_err().0, "classes");
        let zero = Classes::new().class("batch", 0).check().unwrap_err();
        assert!(
            zero.1.contains("\"batch\"") && zero.1.contains("at least 1"),
            "{zero:?}"
        );
        let missing = Classes::new()
            .class("batch", 1)
            .default_class("bulk")
            .check()
            .unwrap_err();
        assert_eq!(missing.0, "default_class");
        assert!(missing.1.contains("bulk") && missing.1.contains("batch"));
        assert!(Classes::new().class("a", 4).class("b", 1).check().is_ok());
    }
}
