//! The parent store.
use std::marker::PhantomData;
use crate::{Child, Parent, Subset, SubsetField};
/// Store.
pub struct Store<P> { db: mongodb::Database, _p: PhantomData<fn() -> P> }
/// Write mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode { /// txn
 Transactional, /// ordered
 Ordered }
impl<P: Parent> Store<P> {
    /// New.
    pub fn new(db: &mongodb::Database) -> Self { Store { db: db.clone(), _p: PhantomData } }
    /// Subset.
    pub fn subset<C: Child>(&self, field: SubsetField<P, C>) -> Subset<'_, P, C> { let _ = &self.db; Subset::new(self, field) }
}
