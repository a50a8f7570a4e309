"""pytest plugin entry point; inert until --stm-backend is given."""
