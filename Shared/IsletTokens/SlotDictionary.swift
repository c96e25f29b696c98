/// A dictionary by string key whose values sit in one array (a freed place is reused), found
/// through a dictionary of 4-byte places: a million entries cost a hash table of 20-byte buckets
/// (the key and the place) and an array of values, where `[String: Value]` keeps a bucket of key
/// and value, about twice as many buckets as entries, and so 2× the value's size (issue 24).
struct SlotDictionary<Value> {
    private var index: [String: Int32] = [:]
    private var values: [Value?] = []
    private var free: [Int32] = []

    var count: Int { index.count }

    subscript(key: String) -> Value? {
        get { index[key].map { values[Int($0)]! } }
        set {
            if let newValue {
                if let place = index[key] {
                    values[Int(place)] = newValue
                } else if let place = free.popLast() {
                    values[Int(place)] = newValue
                    index[key] = place
                } else {
                    index[key] = Int32(values.count)
                    values.append(newValue)
                }
            } else {
                removeValue(forKey: key)
            }
        }
    }

    @discardableResult
    mutating func removeValue(forKey key: String) -> Value? {
        guard let place = index.removeValue(forKey: key) else { return nil }
        let value = values[Int(place)]
        values[Int(place)] = nil
        free.append(place)
        return value
    }

    /// The key as held, when it is: another holder of the same key can share its storage.
    func heldKey(_ key: String) -> String? { index.index(forKey: key).map { index.keys[$0] } }

    /// Changes every value in place.
    mutating func updateEach(_ change: (inout Value) -> Void) {
        for place in values.indices where values[place] != nil { change(&values[place]!) }
    }

    /// Every key and value, in no particular order.
    var all: some Sequence<(key: String, value: Value)> { index.lazy.map { ($0.key, values[Int($0.value)]!) } }
}
