"""Live fault tolerance with torchft (seed §7.2): replica groups, the Lighthouse, auto-shrink."""
