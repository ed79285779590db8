//! farmem memory node.
