import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

/// The registry's rules: who may change which token, what each request writes, and when a
/// push outcome kills a token. Every change is published to `islet.tokens.v1` and applied to the
/// table only once Kafka acknowledged it; a request that changes nothing writes nothing.
///
/// Here: the registry's state and its gates. Its parts, each an extension in a file of its own:
/// registrations (`Registry+Registrations.swift`: who owns a token, tickets, re-registration),
/// the app's other writes (`Registry+Changes.swift`), reads (`Registry+Lookups.swift`), APNs's
/// verdicts (`Registry+Verdicts.swift`), and the write path to Kafka with the sweep
/// (`Registry+WritePath.swift`).
public final class Registry: Sendable {
    /// How many active tokens one user may hold (0: no limit): what one account can make every
    /// service keep in memory.
    public struct Quotas: Sendable, Equatable {
        /// Live activities (update tokens). Default 1000.
        public var liveActivities: Int
        /// Push-to-start tokens (one per device and attributes type). Default 100.
        public var pushToStart: Int
        /// Devices that may follow one activity, each with its own update token (the first
        /// device's under the activity's key, each other's under `<bundleId>/<activityId>/<deviceId>`).
        /// Default 1: one token per activity, rotated by a registration from any device (as
        /// before devices were kept apart). Past it a new device's registration is 429.
        public var devicesPerActivity: Int
        public init(liveActivities: Int = 1_000, pushToStart: Int = 100, devicesPerActivity: Int = 1) {
            self.liveActivities = liveActivities
            self.pushToStart = pushToStart
            self.devicesPerActivity = devicesPerActivity
        }
    }

    public let table: TokenTable
    let quotas: Quotas
    /// The apps served (``RegistrySettings/apps``); empty: any.
    let apps: Set<String>
    let tickets: ActivityTickets?
    let publisher: any TokenRecordPublisher
    let locks = KeyedLocks()
    private let clock: any WallClock
    let logger: Logger
    let metrics = RegistryMetrics()
    private let loaded = Atomic<Bool>(false)
    /// Unscoped topic keys whose records were replaced under their app's key, and whose tombstone
    /// Kafka refused: the next sweep deletes them.
    let pendingLegacyKeys = Mutex(Set<String>())
    /// Invalidations this instance wrote, by key: where each landed, the verdict it applied, when,
    /// and the last record of the key its reader has read before it on the topic since. Another
    /// instance may have written the key just before (a confirmation, a rotation), unseen by this
    /// one's table (its reader lags the topic): when the reader reaches the invalidation, that last
    /// record decides (``readBehind(_:key:at:)``). Kept 10 minutes.
    let ownInvalidations = Mutex(OwnWrites<TokenVerdict>())
    /// An activity's own records this instance registered (`registered`: its table held none),
    /// by key: where each landed, and when. Another instance may have registered the activity just
    /// before from another device of the user, unseen here: when the reader reaches that record,
    /// behind this one, it is written again as that device's record
    /// (``readBehindRegistration(_:key:at:)``). Kept 10 minutes, with several devices only.
    let ownRegistrations = Mutex(OwnWrites<Void>())

    /// `tickets`: verifies the activity tickets of registrations (`nil`: none configured; a
    /// registration that sends one is refused).
    public init(
        table: TokenTable, publisher: any TokenRecordPublisher, logger: Logger, quotas: Quotas = Quotas(),
        tickets: ActivityTickets? = nil, apps: Set<String> = [], clock: any WallClock = SystemWallClock()
    ) {
        self.table = table
        self.quotas = quotas
        self.apps = apps
        self.tickets = tickets
        self.publisher = publisher
        self.logger = logger
        self.clock = clock
    }

    /// Now, at the wire's precision (milliseconds), so that the table holds exactly what a rebuild
    /// from the topic reads back.
    func now() -> Date {
        let date = clock.date
        return IsletDate.parse(IsletDate.format(date)) ?? date
    }

    /// Whether the table holds everything the topic held at start-up. Until then every API call
    /// is answered 503: an ownership check against a half-built table could be wrong.
    public var isReady: Bool { loaded.load(ordering: .acquiring) }

    public func markReady() { loaded.store(true, ordering: .releasing) }

    // MARK: Gates

    func requireReady() throws(APIError) {
        guard isReady else {
            throw APIError(.serviceUnavailable, .unavailable, reason: "the registry is loading its tokens; retry shortly")
        }
    }
}
