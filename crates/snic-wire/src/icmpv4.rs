//! TODO(owner): icmpv4
