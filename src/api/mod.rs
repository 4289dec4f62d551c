//! The API facade: what a user configures and calls. Everything here is a
//! thin layer over the layers below.

pub(crate) mod builder;
#[cfg(doctest)]
mod lifetime_rules;
pub(crate) mod runtime;
pub(crate) mod tasks;
