enum IsletRuntimePlaceholder {}
