//! Helpers shared by the runtime's integration tests.

use farmem_runtime::uffd;

/// True (with the reason printed) when userfaultfd cannot serve these tests here.
pub fn skip() -> bool {
    match uffd::available() {
        Ok(()) => false,
        Err(why) => {
            eprintln!("skipping: {why}");
            true
        }
    }
}
