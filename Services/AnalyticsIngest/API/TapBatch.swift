import Foundation
import IsletMessages

/// Up to ``IngestSettings/maxBatch`` taps the app buffered (offline, or to save radio time).
public struct TapBatch: Codable, Sendable, Equatable {
    public var taps: [TapInput]

    public init(taps: [TapInput]) {
        self.taps = taps
    }
}

extension TapBatch: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), case .array(let items)? = members.members["taps"] else { return nil }
        var taps: [TapInput] = []
        taps.reserveCapacity(items.count)
        for item in items {
            guard let tap = TapInput(json: item) else { return nil }
            taps.append(tap)
        }
        self.init(taps: taps)
    }
}
