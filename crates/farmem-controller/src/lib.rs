//! farmem rack controller.
