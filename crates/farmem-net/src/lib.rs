//! farmem transport.
