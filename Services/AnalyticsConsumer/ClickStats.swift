import Foundation
import IsletMessages

/// What an analytics team might keep from `islet.clicks.v1` and `islet.push-outcomes.v1`: per
/// app × attributes type × surface × element, the taps, and the taps per update delivered to every
/// activity of that app and attributes type (every delivered push shows every surface, so each cell
/// has its app and type's deliveries as its denominator), tapped or not.
///
/// The app is its bundle id: a click's `app.bundleId` (from its signed link), an outcome's
/// `bundleId`. The environment is left out, as outcomes do not name it. A click whose link named no
/// app (signed before links did: such links stop counting 12 hours after they were issued) and an
/// outcome that names none (written before outcomes did) count under the app ``unknownApp``, with
/// each other: the two apps' clicks are not told apart there, as they were not before.
///
/// An outcome names its request's attributes type. One written before outcomes did is counted
/// for its activity, and attributed to the app and type of the activity's first click (in either
/// order); until then it is *unattributed*.
///
/// Records arrive at least once: clicks are deduplicated by `clickId`, outcomes by `requestId`,
/// each over the last ``capacity`` ids. Everything is bounded by ``capacity``.
public struct ClickStats: Sendable {
    /// The app of clicks and outcomes that name none: `unknown` (no bundle id is one word).
    public static let unknownApp = "unknown"

    /// What deliveries are counted by: an app and an attributes type.
    public struct AppType: Hashable, Sendable, Comparable {
        /// The bundle id, or ``ClickStats/unknownApp``.
        public var app: String
        public var attributesType: String

        public init(app: String, attributesType: String) {
            self.app = app
            self.attributesType = attributesType
        }

        public static func < (a: AppType, b: AppType) -> Bool { (a.app, a.attributesType) < (b.app, b.attributesType) }
    }

    /// One row of the table.
    public struct Cell: Hashable, Sendable, Comparable {
        /// The bundle id, or ``ClickStats/unknownApp``.
        public var app: String
        public var attributesType: String
        public var surface: String
        public var element: String

        public init(app: String, attributesType: String, surface: String, element: String) {
            self.app = app
            self.attributesType = attributesType
            self.surface = surface
            self.element = element
        }

        /// The app and type whose deliveries the cell divides by.
        public var appType: AppType { AppType(app: app, attributesType: attributesType) }

        public static func < (a: Cell, b: Cell) -> Bool {
            (a.app, a.attributesType, a.surface, a.element) < (b.app, b.attributesType, b.surface, b.element)
        }
    }

    public struct Row: Sendable, Equatable {
        public var cell: Cell
        public var taps: Int
        /// Updates delivered to the activities of the cell's app and attributes type.
        public var deliveredUpdates: Int
        /// `taps / deliveredUpdates`, or `nil` while nothing was delivered.
        public var tapsPerDeliveredUpdate: Double? { deliveredUpdates > 0 ? Double(taps) / Double(deliveredUpdates) : nil }
    }

    private struct Activity {
        var appType: AppType?
        var delivered: Int = 0
    }

    public let capacity: Int
    public private(set) var taps: [Cell: Int] = [:]
    public private(set) var delivered: [AppType: Int] = [:]
    /// Every delivered update counted, attributed or not.
    public private(set) var deliveredTotal = 0
    /// Clicks read again (same `clickId`) and not counted twice.
    public private(set) var duplicateClicks = 0
    /// Clicks not counted because the table already has ``capacity`` cells.
    public private(set) var droppedCells = 0
    private var activities = BoundedMap<String, Activity>(capacity: 1)
    private var seenClicks = BoundedMap<String, Bool>(capacity: 1)
    private var seenOutcomes = BoundedMap<String, Bool>(capacity: 1)

    public init(capacity: Int = 100_000) {
        self.capacity = capacity
        activities = BoundedMap(capacity: capacity)
        seenClicks = BoundedMap(capacity: capacity)
        seenOutcomes = BoundedMap(capacity: capacity)
    }

    /// Counts a click (once per `clickId`). Returns the cell it counted in, if it counted.
    @discardableResult
    public mutating func record(_ click: ClickEvent) -> Cell? {
        guard seenClicks[click.clickId] == nil else {
            duplicateClicks += 1
            return nil
        }
        seenClicks[click.clickId] = true
        let cell = Cell(
            app: click.app?.bundleId ?? Self.unknownApp, attributesType: click.attributesType, surface: click.surface.rawValue, element: click.element)
        guard taps[cell] != nil || taps.count < capacity else {
            droppedCells += 1
            return nil
        }
        taps[cell, default: 0] += 1
        var activity = activities[click.activityId] ?? Activity()
        if activity.appType == nil {
            activity.appType = cell.appType
            // Updates delivered before the first click of this activity now have an app and a type.
            if activity.delivered > 0 { delivered[cell.appType, default: 0] += activity.delivered }
        }
        activities[click.activityId] = activity
        return cell
    }

    /// Counts a delivered push (once per `requestId`) for its app and attributes type; other
    /// outcomes are ignored, and so is an old outcome (without its type) of a push-to-start.
    /// Returns the app and type it was attributed to, if known yet.
    @discardableResult
    public mutating func record(_ outcome: PushOutcome) -> AppType? {
        // A widget push (iOS 26) reloads a home-screen widget: not a Live Activity update.
        guard outcome.result == .delivered || outcome.result == .deliveredDowngraded, outcome.widgetKey == nil,
            seenOutcomes[outcome.requestId] == nil
        else { return nil }
        if let type = outcome.attributesType {
            // Every delivered push (a push-to-start too) shows the activity on every surface.
            let appType = AppType(app: outcome.bundleId ?? Self.unknownApp, attributesType: type)
            seenOutcomes[outcome.requestId] = true
            deliveredTotal += 1
            delivered[appType, default: 0] += 1
            return appType
        }
        guard let activityId = outcome.activityId else { return nil }
        seenOutcomes[outcome.requestId] = true
        deliveredTotal += 1
        var activity = activities[activityId] ?? Activity()
        activity.delivered += 1
        activities[activityId] = activity
        guard let appType = activity.appType else { return nil }
        delivered[appType, default: 0] += 1
        return appType
    }

    /// Delivered updates whose activity's app and type are not known (yet).
    public var unattributedDelivered: Int { deliveredTotal - delivered.values.reduce(0, +) }

    /// The table, sorted by app, attributes type, surface, element.
    public var rows: [Row] {
        taps.keys.sorted().map { cell in
            Row(cell: cell, taps: taps[cell]!, deliveredUpdates: delivered[cell.appType] ?? 0)
        }
    }

    /// The table as text, for the log.
    public func render() -> String {
        let header = ["app", "attributes type", "surface", "element", "taps", "delivered updates", "taps / update"]
        var lines = [header]
        for row in rows {
            lines.append([
                row.cell.app, row.cell.attributesType, row.cell.surface, row.cell.element, "\(row.taps)", "\(row.deliveredUpdates)",
                row.tapsPerDeliveredUpdate.map { String(format: "%.3f", $0) } ?? "-",
            ])
        }
        let widths = header.indices.map { column in lines.map { $0[column].count }.max() ?? 0 }
        let numeric = Set([4, 5, 6])
        var text = lines.map { line in
            line.enumerated().map { column, value in
                let padding = String(repeating: " ", count: widths[column] - value.count)
                return numeric.contains(column) ? padding + value : value + padding
            }.joined(separator: "  ")
        }.joined(separator: "\n")
        text += "\n(\(deliveredTotal) updates delivered, \(unattributedDelivered) to activities without a tap yet; \(duplicateClicks) repeated clicks ignored)"
        return text
    }
}

/// A dictionary that keeps the last `capacity` keys inserted, forgetting the oldest first.
struct BoundedMap<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private var values: [Key: Value] = [:]
    private var order: [Key] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    subscript(key: Key) -> Value? {
        get { values[key] }
        set {
            guard let newValue else {
                values.removeValue(forKey: key)
                return
            }
            if values.updateValue(newValue, forKey: key) == nil {
                if order.count < capacity {
                    order.append(key)
                } else {
                    values.removeValue(forKey: order[next])
                    order[next] = key
                    next = (next + 1) % capacity
                }
            }
        }
    }

    var count: Int { values.count }
}
