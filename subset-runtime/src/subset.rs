//! Handle.
use crate::{Child, Parent, Store, SubsetField};
/// Handle.
pub struct Subset<'a, P, C> { store: &'a Store<P>, field: SubsetField<P, C> }
impl<'a, P: Parent, C: Child> Subset<'a, P, C> {
    pub(crate) fn new(store: &'a Store<P>, field: SubsetField<P, C>) -> Self { Subset { store, field } }
}
