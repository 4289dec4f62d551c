//! What a graph's check or run reports when it fails.

use crate::core::unwind::panic_message;
use crate::graph::ids::Node;
use std::any::Any;
use std::fmt;

/// Why a graph did not run, or did not run completely. It is `Send` and
/// `Sync`, so `?` turns it into `Box<dyn Error + Send + Sync>` (or an
/// `anyhow::Error`).
///
/// ```
/// use selvedge::{Graph, GraphError};
///
/// let mut g = Graph::new();
/// let a = g.node_named("a", || panic!("bad input"));
/// let b = g.node_named("b", || {});
/// let c = g.node_named("c", || {});
/// g.precede(a, b);
/// match g.run() {
///     Err(GraphError::Failed { panicked, skipped, .. }) => {
///         assert_eq!(panicked.len(), 1);
///         assert_eq!(panicked[0].name, "a");
///         assert_eq!(panicked[0].message(), Some("bad input"));
///         assert_eq!(skipped, [b]); // c, which does not follow a, ran
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
#[non_exhaustive]
pub enum GraphError {
    /// The edges form a cycle; nothing ran.
    Cycle {
        /// The nodes on the cycle, each before the next, the last before
        /// the first.
        nodes: Vec<Node>,
        /// Their names (see [`Graph::name`](crate::Graph::name)).
        names: Vec<String>,
    },
    /// Nodes panicked (or, should a runtime cancel a run's queued nodes,
    /// the run was cut short). Every node that follows one of them,
    /// directly or not, was skipped for this run; every other node ran.
    /// The graph may be run again; if the failed nodes, or those skipped,
    /// write [`Data`](crate::Data) handles, those are poisoned, and
    /// [`Graph::recover`](crate::Graph::recover) lets the next run clear
    /// that poison (else its nodes refuse them).
    Failed {
        /// Each node that panicked, with its panic, in the order they
        /// panicked; a node that refused to run because a
        /// [`Data`](crate::Data) handle it declared is poisoned is among
        /// them, its message saying so.
        panicked: Vec<NodePanic>,
        /// The nodes skipped, in the order they were added to the graph.
        skipped: Vec<Node>,
        /// Their names, in the same order.
        skipped_names: Vec<String>,
    },
}

/// A node that panicked in a graph's run, with its panic's payload.
///
/// ```
/// let mut g = selvedge::Graph::new();
/// let n = g.node(|| panic!("boom"));
/// let Err(selvedge::GraphError::Failed { panicked, .. }) = g.run() else { panic!() };
/// assert_eq!(panicked[0].node, n);
/// assert_eq!(panicked[0].message(), Some("boom"));
/// ```
#[non_exhaustive]
pub struct NodePanic {
    /// The node.
    pub node: Node,
    /// Its name (see [`Graph::name`](crate::Graph::name)).
    pub name: String,
    /// The panic's message, when the payload is a string.
    message: Option<String>,
    payload: Payload,
}

/// A panic's payload, reachable only by value: so a `NodePanic`, and the
/// error holding it, can be `Sync` (for `anyhow` and `Box<dyn Error + Send
/// + Sync>`) although the payload itself is only `Send`.
struct Payload(Box<dyn Any + Send>);

// SAFETY: nothing reaches the payload through a shared reference: it is
// only moved out, by value (`NodePanic::into_payload`). Sharing a `&Payload`
// between threads therefore shares nothing.
unsafe impl Sync for Payload {}

impl NodePanic {
    pub(crate) fn new(node: Node, name: String, payload: Box<dyn Any + Send>) -> Self {
        Self {
            node,
            name,
            message: panic_message(&*payload).map(str::to_owned),
            payload: Payload(payload),
        }
    }

    /// The panic's message, when the payload is a string (as `panic!`
    /// makes it).
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// g.node(|| panic!("code {}", 7));
    /// let Err(selvedge::GraphError::Failed { panicked, .. }) = g.run() else { panic!() };
    /// assert_eq!(panicked[0].message(), Some("code 7"));
    /// ```
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The panic's payload, as [`std::panic::catch_unwind`] returns it (to
    /// resume the panic, say).
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// g.node(|| std::panic::panic_any(42u32));
    /// let Err(selvedge::GraphError::Failed { mut panicked, .. }) = g.run() else { panic!() };
    /// let payload = panicked.remove(0).into_payload();
    /// assert_eq!(payload.downcast_ref::<u32>(), Some(&42));
    /// ```
    pub fn into_payload(self) -> Box<dyn Any + Send> {
        self.payload.0
    }
}

impl fmt::Debug for NodePanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePanic")
            .field("node", &self.node)
            .field("name", &self.name)
            .field("message", &self.message())
            .finish()
    }
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::Cycle { names, .. } => {
                f.write_str("the graph has a cycle: ")?;
                for name in names {
                    write!(f, "{name} -> ")?;
                }
                f.write_str(names.first().map_or("", String::as_str))
            }
            GraphError::Failed {
                panicked,
                skipped_names,
                ..
            } => {
                for (i, p) in panicked.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    match p.message() {
                        Some(m) => write!(f, "node '{}' panicked: {m}", p.name)?,
                        None => write!(f, "node '{}' panicked", p.name)?,
                    }
                }
                let after = match panicked.len() {
                    0 => {
                        f.write_str("the run was cancelled (its runtime shut down)")?;
                        ""
                    }
                    1 => " after it",
                    _ => " after them",
                };
                match skipped_names.len() {
                    0 => Ok(()),
                    1 => write!(f, "; 1 node{after} was skipped: {}", skipped_names[0]),
                    k => {
                        write!(f, "; {k} nodes{after} were skipped: ")?;
                        write_some(f, skipped_names)
                    }
                }
            }
        }
    }
}

/// The first few of `names`, and how many more there are.
fn write_some(f: &mut fmt::Formatter<'_>, names: &[String]) -> fmt::Result {
    const SHOWN: usize = 8;
    for (i, name) in names.iter().take(SHOWN).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(name)?;
    }
    if names.len() > SHOWN {
        write!(f, " and {} more", names.len() - SHOWN)?;
    }
    Ok(())
}

impl fmt::Debug for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::Cycle { names, .. } => {
                f.debug_struct("Cycle").field("names", names).finish()
            }
            GraphError::Failed {
                panicked,
                skipped_names,
                ..
            } => f
                .debug_struct("Failed")
                .field("panicked", panicked)
                .field("skipped", skipped_names)
                .finish(),
        }
    }
}

impl std::error::Error for GraphError {}

// A graph's error goes where errors go: `anyhow`, `Box<dyn Error + Send +
// Sync>`, across threads.
static_assertions::assert_impl_all!(GraphError: Send, Sync, std::error::Error);
