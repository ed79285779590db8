//! SIGBUS stays deliverable on the signal path (see `touch`): the masks a
//! program sets or waits with are passed on without it.

use std::sync::atomic::Ordering;

use libc::c_int;

use super::state::ON;

/// Whether SIGBUS must stay deliverable: the signal path is on.
fn keep_sigbus() -> bool {
    ON.load(Ordering::Acquire)
}

/// A caller's signal set as passed on: itself, or a copy without SIGBUS
/// when the mask it sets would block SIGBUS.
pub(super) struct Mask {
    given: *const libc::sigset_t,
    copy: Option<libc::sigset_t>,
}

impl Mask {
    /// `set` as a mask change `how` (`SIG_SETMASK` for a wait's mask).
    pub(super) fn without_sigbus(how: c_int, set: *const libc::sigset_t) -> Self {
        let mut mask = Self {
            given: set,
            copy: None,
        };
        if set.is_null() || how == libc::SIG_UNBLOCK || !keep_sigbus() {
            return mask;
        }
        // SAFETY: `set` is the caller's valid signal set; the copy is ours.
        unsafe {
            if libc::sigismember(set, libc::SIGBUS) == 1 {
                let mut copy = *set;
                libc::sigdelset(&mut copy, libc::SIGBUS);
                mask.copy = Some(copy);
            }
        }
        mask
    }

    pub(super) fn ptr(&self) -> *const libc::sigset_t {
        self.copy.as_ref().map_or(self.given, |c| c as *const _)
    }
}

/// Leaves SIGBUS out of a handler's mask (see the module docs).
pub(super) fn mask_without_sigbus(mask: &mut libc::sigset_t) {
    if keep_sigbus() {
        // SAFETY: a valid signal set of the caller's.
        unsafe { libc::sigdelset(mask, libc::SIGBUS) };
    }
}
