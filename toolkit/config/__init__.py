"""The configuration schema (:mod:`toolkit.config.schema`): fields, types, enums, defaults, file loading."""
