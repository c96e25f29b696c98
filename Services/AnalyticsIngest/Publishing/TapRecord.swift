import IsletKafka
import IsletMessages

/// A record analytics-ingest writes: a verified tap, or a rejected one.
public enum TapRecord: Sendable {
    case click(ClickEvent)
    case rejected(RejectedClick)
}
