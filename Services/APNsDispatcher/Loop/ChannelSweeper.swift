import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Lists and deletes an app's broadcast channels at APNs (``APNsClient`` in production).
public protocol ChannelListing: Sendable {
    /// The ids of the app's channels in `environment`.
    func channels(bundleID: String, teamID: String, environment: APNsEnvironment) async throws -> [String]
    func deleteChannel(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws
}

extension APNsClient: ChannelListing {}

/// The orphan sweep of broadcast channels (issue 61 item 6). APNs keeps at most 10,000 channels per
/// app and environment; a channel Islet made whose record was never written (the dispatcher died
/// between APNs's answer and the record, or APNs made it and its answer was lost) is held at APNs
/// for ever. At start-up and then every ``interval``, for each app and environment: the app's
/// channels are listed, then `islet.broadcast-channels.v1` is read to its end, and a channel no
/// record owns (none names it, or its record says it was deleted) is an orphan. With ``deletes``
/// (`ISLET_CHANNEL_SWEEP_DELETE`) it is deleted — only when the previous pass found it unowned
/// too, so that a channel being made while a pass lists (its record written a moment later) is
/// never taken; without, orphans are counted and logged. Deleting is the operator's choice: APNs
/// lists every channel of the app, also those another deployment made for the same app and
/// environment (a staging stack serving TestFlight builds), which this one's records never name.
/// The count of channels held is a gauge, with a warning near the cap.
///
/// Every dispatcher instance sweeps (a second delete of the same channel is done: APNs answers
/// that it is gone). No phone was ever told of an orphan: a channel's record is written before
/// anything is sent on it.
public struct ChannelSweeper: Service {
    /// What a pass reads of the records: the channel ids owned, per app and environment.
    public typealias OwnedChannels = @Sendable () async throws -> [BroadcastChannelRecord]

    let listing: any ChannelListing
    let records: OwnedChannels
    /// Bundle id → team (`ISLET_APNS_APPS`).
    let teams: [String: String]
    let environments: [APNsEnvironment]
    /// Whether orphans are deleted (or only counted and logged).
    let deletes: Bool
    /// The environments are served by one host (a simulator for both): a channel recorded in either
    /// is owned in both, since the host lists the same channels for each.
    let sharedHost: Bool
    let interval: Duration
    /// The second pass after the start-up one: it confirms the orphans the first found.
    let confirmAfter: Duration
    let logger: Logger
    private let state = StateBox()

    /// APNs's cap on an app's channels per environment.
    public static let capacity = 10_000
    /// The share of the cap past which every pass warns.
    public static let warningShare = 0.9
    /// The shortest interval and confirmation gap: a record written late must be read before its
    /// channel's second sighting.
    public static let minimumInterval: Duration = .seconds(60)

    /// The channels found unowned by the last pass, per app and environment.
    private final class StateBox: Sendable {
        let unowned = Mutex<[AppTarget: Set<String>]>([:])
    }

    public init(
        listing: any ChannelListing, records: @escaping OwnedChannels, teams: [String: String],
        environments: [APNsEnvironment] = [.production], deletes: Bool = false, sharedHost: Bool = false, interval: Duration = .seconds(3_600),
        confirmAfter: Duration = .seconds(600), logger: Logger
    ) {
        self.listing = listing
        self.records = records
        self.teams = teams
        self.environments = environments
        self.deletes = deletes
        self.sharedHost = sharedHost
        self.interval = max(interval, Self.minimumInterval)
        self.confirmAfter = max(confirmAfter, Self.minimumInterval)
        self.logger = logger
    }

    public func run() async throws {
        var wait = Duration.seconds(30)
        var passes = 0
        while !Task.isCancelled {
            let pause = wait
            guard (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: pause) }) != nil else { return }
            await sweep()
            passes += 1
            wait = passes == 1 ? confirmAfter : interval
        }
    }

    /// What one pass did, per app and environment.
    public struct Pass: Sendable, Equatable {
        /// Channels APNs listed.
        public var held = 0
        /// Channels no record owns (deleted now, or on the next pass if first seen now).
        public var unowned = 0
        /// Channels deleted by this pass.
        public var deleted: [String] = []
    }

    /// One pass over every app and environment; what it found, for those APNs listed.
    @discardableResult
    public func sweep() async -> [AppTarget: Pass] {
        var listed: [AppTarget: [String]] = [:]
        for (bundleId, team) in teams.sorted(by: { $0.key < $1.key }) {
            for environment in environments {
                let app = AppTarget(bundleId: bundleId, environment: environment)
                do {
                    listed[app] = try await listing.channels(bundleID: bundleId, teamID: team, environment: environment)
                } catch {
                    // An app without broadcasts enabled, an environment its key is not for: nothing to sweep.
                    logger.debug("broadcast channels not listed", metadata: ["app.bundle_id": "\(bundleId)", "app.environment": "\(environment.rawValue)", "error": "\(error)"])
                }
            }
        }
        guard !listed.isEmpty else { return [:] }
        // Read after listing: a channel made before the list has its record by now, or is being made.
        let owned: [AppTarget: Set<String>]
        do {
            let live = try await records().filter { $0.deletedAt == nil }
            owned = Dictionary(grouping: live, by: { sharedHost ? AppTarget(bundleId: $0.app.bundleId, environment: .production) : $0.app })
                .mapValues { Set($0.map(\.channelId)) }
        } catch {
            logger.warning("broadcast channel records not read: no channel swept this time", metadata: ["error": "\(error)"])
            return [:]
        }
        var passes: [AppTarget: Pass] = [:]
        for (app, ids) in listed.sorted(by: { ($0.key.bundleId, $0.key.environment.rawValue) < ($1.key.bundleId, $1.key.environment.rawValue) }) {
            var pass = Pass(held: ids.count)
            Gauge(label: "islet_dispatcher_broadcast_channels", dimensions: [("bundle_id", app.bundleId), ("environment", app.environment.rawValue)])
                .record(Double(ids.count))
            if Double(ids.count) >= Double(Self.capacity) * Self.warningShare {
                logger.warning(
                    "an app holds broadcast channels near APNs's cap of 10,000: new broadcast activities will be refused (CannotCreateChannelConfig)",
                    metadata: ["app.bundle_id": "\(app.bundleId)", "app.environment": "\(app.environment.rawValue)", "channels": "\(ids.count)"])
            }
            let unowned = Set(ids).subtracting(owned[sharedHost ? AppTarget(bundleId: app.bundleId, environment: .production) : app] ?? [])
            pass.unowned = unowned.count
            if !unowned.isEmpty, !deletes {
                logger.warning(
                    "broadcast channels at APNs that no record of this deployment owns (made and never recorded, or another deployment's): not deleted (ISLET_CHANNEL_SWEEP_DELETE)",
                    metadata: ["app.bundle_id": "\(app.bundleId)", "app.environment": "\(app.environment.rawValue)", "channels": "\(unowned.count)"])
                passes[app] = pass
                continue
            }
            let seenBefore = state.unowned.withLock { $0[app] ?? [] }
            var left = unowned
            for id in unowned.intersection(seenBefore).sorted() {
                guard let team = teams[app.bundleId] else { continue }
                do {
                    try await listing.deleteChannel(id, bundleID: app.bundleId, teamID: team, environment: app.environment)
                    pass.deleted.append(id)
                    left.remove(id)
                } catch let error as APNsChannelError where error.channelIsGone {
                    left.remove(id)
                } catch {
                    logger.warning(
                        "an orphaned broadcast channel could not be deleted: tried again on the next pass",
                        metadata: ["app.bundle_id": "\(app.bundleId)", "channel.id": "\(id)", "error": "\(error)"])
                }
            }
            if !pass.deleted.isEmpty {
                Counter(label: "islet_dispatcher_channels_swept_total", dimensions: [("bundle_id", app.bundleId)]).increment(by: pass.deleted.count)
                logger.notice(
                    "orphaned broadcast channels deleted (made at APNs, never recorded)",
                    metadata: ["app.bundle_id": "\(app.bundleId)", "app.environment": "\(app.environment.rawValue)", "channels": "\(pass.deleted.count)"])
            }
            state.unowned.withLock { $0[app] = left }
            passes[app] = pass
        }
        return passes
    }
}

extension ChannelSweeper {
    /// The records of `islet.broadcast-channels.v1`, read to its end (it is small: one per
    /// broadcast activity, compacted). Throws when one does not decode: it may own a channel.
    public static func readRecords(topic: String, bootstrapServers: String, logger: Logger) -> OwnedChannels {
        {
            let progress = try await TopicSnapshot.read(
                [topic], bootstrapServers: bootstrapServers, timeout: .seconds(60), logger: logger, until: { $0.reachedEnds })
            guard !progress.timedOut else { throw KafkaError(code: .consumer, message: "\(topic) not read to its end within 60 s") }
            var latest: [String: BroadcastChannelRecord] = [:]
            for message in progress.messages {
                guard let key = message.keyString else { continue }
                guard let value = message.value else {
                    latest[key] = nil
                    continue
                }
                // A record this version cannot read may own a channel: nothing is swept until it can.
                latest[key] = try IsletJSON.decode(BroadcastChannelRecord.self, from: value)
            }
            return Array(latest.values)
        }
    }
}
