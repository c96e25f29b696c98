import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

extension ActivityMemory {
    /// The memory a changelog record holds.
    init(_ record: ContentMemoryRecord.Activity) {
        self.init()
        partition = record.partition
        lastState = record.lastState
        alertTimes = record.alertTimes ?? []
        startedAt = record.startedAt
        if let latest = record.latest {
            restoreLatest(
                LatestRequest(
                    requestId: latest.requestId, event: latest.event, app: latest.app, attributesType: latest.attributesType,
                    createdAt: latest.createdAt, staleDate: latest.staleDate, contentSequence: latest.contentSequence, isContent: latest.content,
                    isPushToStart: latest.pushToStartKey != nil, isUserStart: latest.userStart == true),
                pushToStartKey: latest.pushToStartKey)
        }
        startedWith = record.startedWith
        lastSequence = record.lastSequence
        lastTimestamp = record.lastTimestamp
        ended = record.ended
        payloadStoredAt = record.payloadStoredAt.map { KafkaPosition(partition: $0.partition, offset: $0.offset) }
        // A latest request with no place on Kafka (its delivery report had none) cannot be read
        // again: the monitor leaves the activity alone until its next request, as for a lost one.
        payloadLost = (record.payloadLost ?? false) || (record.latest != nil && record.payloadStoredAt == nil)
        outcomePositions = (record.outcomePositions ?? []).map { KafkaPosition(partition: $0.partition, offset: $0.offset) }
        for outcome in record.outcomes ?? [] { restoreOutcome(requestId: outcome.requestId, result: outcome.result, completedAt: outcome.completedAt) }
        contentRequestId = record.contentRequestId
        resends = record.resends
        lastResendAt = record.lastResendAt
        gone = record.gone
        goneAt = record.goneAt
        goneToken = record.goneToken
        inlinedImages = Set(record.inlinedImages ?? [])
        pendingImages = Dictionary(
            (record.pendingImages ?? []).map { ($0.requestId, PendingImages(urls: Set($0.urls), since: $0.since)) }, uniquingKeysWith: { _, last in last })
        restoreSteps(record.steps ?? [])
        startWatch = record.startWatch
        channelId = record.channelId
    }

    /// The changelog record of this memory, the activity's (`<bundleId>/<activityId>`) in `partition`.
    func record(activityKey: String, partition: Int32) -> ContentMemoryRecord.Activity {
        let bundleId = String(activityKey.prefix { $0 != "/" })
        let activityId = String(activityKey.drop { $0 != "/" }.dropFirst())
        let latest = self.latest.map {
            ContentMemoryRecord.Latest(
                requestId: $0.requestId, event: $0.event, app: $0.app, attributesType: $0.attributesType, createdAt: $0.createdAt,
                staleDate: $0.staleDate, contentSequence: $0.contentSequence, content: $0.isContent, pushToStartKey: latestPushToStartKey,
                userStart: $0.isUserStart ? true : nil)
        }
        let outcomes = self.outcomes.map { ContentMemoryRecord.Outcome(requestId: $0.requestId, result: $0.result, completedAt: $0.completedAt) }
        return ContentMemoryRecord.Activity(
            bundleId: bundleId, activityId: activityId, partition: partition, lastSequence: lastSequence, lastTimestamp: lastTimestamp,
            lastState: lastState, alertTimes: alertTimes.isEmpty ? nil : alertTimes, startedAt: startedAt, ended: ended, latest: latest,
            payloadStoredAt: payloadStoredAt.map { .init(partition: $0.partition, offset: $0.offset) }, payloadLost: payloadLost ? true : nil,
            outcomes: outcomes.isEmpty ? nil : outcomes,
            contentRequestId: contentRequestId, resends: resends, lastResendAt: lastResendAt, gone: gone, goneAt: goneAt, goneToken: goneToken,
            inlinedImages: inlinedImages.isEmpty ? nil : inlinedImages.sorted(),
            pendingImages: pendingImages.isEmpty
                ? nil : pendingImages.sorted { $0.key < $1.key }.map { .init(requestId: $0.key, urls: $0.value.urls.sorted(), since: $0.value.since) },
            outcomePositions: outcomePositions.isEmpty ? nil : outcomePositions.map { .init(partition: $0.partition, offset: $0.offset) },
            startedWith: startedWith, steps: steps.isEmpty ? nil : steps, startWatch: startWatch, channelId: channelId)
    }
}

/// content-service's changelog: a ``ChangelogWriter`` of ``ContentChanges``.
public typealias ContentChangelog = ChangelogWriter<ContentChanges>

extension ChangelogWriter where Source == ContentChanges {
    /// Writes content-service's changelog, `islet.content-memory.v1` (docs/topics.md), every
    /// `interval` and when partitions are revoked; rounds run one at a time. A round waits at most
    /// `settleTimeout` for the requests sent to be acknowledged before it gives up.
    public convenience init(
        engine: ContentEngine, sender: RequestSender, producer: any MessageSink, positions: ReadPositions,
        topic: String = IsletTopics.contentMemory.name, interval: Duration = .seconds(5), settleTimeout: Duration = .seconds(5), logger: Logger
    ) {
        self.init(
            source: ContentChanges(engine: engine, sender: sender, positions: positions, settleTimeout: settleTimeout), producer: producer,
            topic: topic, interval: interval, slice: 10_000, oneAtATime: true, name: "changelog", metrics: "islet_content_changelog", logger: logger)
    }
}
