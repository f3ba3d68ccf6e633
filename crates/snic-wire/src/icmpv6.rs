//! TODO(owner): icmpv6
