//! TODO(owner): ethernet
