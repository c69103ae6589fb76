//! Every name the library writes in your database besides your documents: the field it keeps
//! in each parent it writes ([`Names::marker`]), and its own collections, all named
//! `<prefix>_<what>` under one prefix ([`DEFAULT_PREFIX`] unless the store is given another with
//! [`StoreOptions::bookkeeping_prefix`](crate::StoreOptions::bookkeeping_prefix); the command line's
//! `--bookkeeping-prefix`). A store's names are [`Store::bookkeeping`](crate::Store::bookkeeping).
//! What each holds, which call creates it, whether it is safe to drop and what cleans it: the
//! guide's page "what subset keeps in your database" (`subset::guide::bookkeeping`).

pub use crate::engine::{
    DefinitionStatus, FoldQueue, FollowerPlace, JobJournal, ModelStatus, Registered,
    RegisteredDefinition, Status, ViewName,
};
pub use names::{Names, PrefixError, PrefixProblem, DEFAULT_PREFIX, MAX_PREFIX_LEN};

pub(crate) mod names;
