import IsletMessages

/// Why an event cannot become content: the field at fault and the problem, as for a message that
/// breaks a rule of its type. Such events go to the dead-letter topic (the gRPC API answers
/// INVALID_ARGUMENT naming the field).
public typealias ContentError = MessageValidationError
