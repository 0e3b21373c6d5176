"""Architecture families: one folder each, registered through the ``zoo.architectures`` entry point."""
