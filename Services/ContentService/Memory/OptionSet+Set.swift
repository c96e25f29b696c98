extension OptionSet {
    mutating func set(_ member: Element, _ on: Bool) {
        if on { insert(member) } else { remove(member) }
    }
}
