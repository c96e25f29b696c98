import Foundation
import IsletLinks
import IsletMessages
import Mustache

/// Renders a template's server-driven layout for one event into the JSON the app's widget reads
/// (Lyft's RichText / ProgressBar / RemoteImage models), with a signed link on every surface and
/// on every element that has one. An element's link names the surface it is drawn on: the
/// `expanded` region's `islandExpanded`, the `lockScreen` region's `lockScreen` (the collapsed
/// island's regions have no element links: ``TemplateLoader``).
///
/// ```json
/// {"minimal": [{"richText": {"elements": [{"icon": "bag.fill"}], "accessibility": "Order 42"}}],
///  "expanded": [{"progressBar": {"position": 60, "points": [0, 50, 100]}}, …],
///  "lockScreen": [{"richText": {"elements": [{"text": "Preparing", "link": "fooddelivery://…&isl_s=lockScreen&isl_e=status…"}]}}], …}
/// ```
struct LayoutRenderer {
    let context: [String: Any]
    let contentState: [String: JSONValue]
    /// Signs the event's links (its base URL, activity, type, sequence and time).
    let links: LinkSigner
    /// Thumbnails by image URL (base64 JPEG, best first), the rung of them to inline (`nil`: none),
    /// and the URLs already inlined in an earlier payload of the activity (not again).
    var images: [String: [String]] = [:]
    var imageRung: Int? = nil
    var alreadyInlined: Set<String> = []

    /// The signer of an event's links: the app's URL for the activity (the template's `link`,
    /// rendered), the activity, its type, the app the content is for and the content's sequence,
    /// issued now.
    static func links(
        baseURL: String, template: ActivityTemplate, event: ActivityEvent, app: AppTarget, keyring: LinkKeyring, issuedAt: Date
    ) throws(ContentError) -> LinkSigner {
        do {
            return try LinkSigner(
                baseURL: baseURL, activityId: event.activityId, attributesType: template.attributesType, contentSequence: event.sequence,
                issuedAt: issuedAt, key: keyring.signing, app: app)
        } catch {
            throw ContentError(field: "link", problem: "\(error)")
        }
    }

    /// The image URLs `layout` shows over `context`.
    static func imageURLs(_ layout: ActivityTemplate.Layout, context: [String: Any]) -> [String] {
        var urls: [String] = []
        for case .remoteImage(let url, _) in layout.allComponents {
            let address = url.render(context)
            if !address.isEmpty, !urls.contains(address) { urls.append(address) }
        }
        return urls
    }

    /// The surfaces' components; texts ranked below `droppingRanksBelow` are left out.
    func render(_ layout: ActivityTemplate.Layout, droppingRanksBelow threshold: Int) throws(ContentError) -> JSONValue {
        var regions: [String: JSONValue] = [
            "minimal": try components(layout.minimal, surface: .minimal, threshold: threshold),
            "compactLeading": try components(layout.compactLeading, surface: .compactLeading, threshold: threshold),
            "compactTrailing": try components(layout.compactTrailing, surface: .compactTrailing, threshold: threshold),
            "expanded": try components(layout.expanded, surface: .islandExpanded, threshold: threshold),
        ]
        if let lockScreen = layout.lockScreen {
            regions["lockScreen"] = try components(lockScreen, surface: .lockScreen, threshold: threshold)
        }
        return .object(regions)
    }

    /// The widget URL of each surface (`widgetURL`), signed.
    func widgetLinks() throws(ContentError) -> JSONValue {
        var links: [String: JSONValue] = [:]
        for surface in Surface.knownValues {
            links[surface.rawValue] = .string(try link(surface: surface, element: "widget"))
        }
        return .object(links)
    }

    private func link(surface: Surface, element: String) throws(ContentError) -> String {
        do {
            return try links.sign(surface: surface, element: element)
        } catch {
            throw ContentError(field: "link", problem: "\(error)")
        }
    }

    private func components(_ components: [ActivityTemplate.Component], surface: Surface, threshold: Int) throws(ContentError) -> JSONValue {
        var rendered: [JSONValue] = []
        for component in components {
            switch component {
            case .richText(let elements, let accessibility):
                var items: [JSONValue] = []
                for element in elements where (element.rank ?? Int.max) >= threshold {
                    var item: [String: JSONValue]
                    switch element.kind {
                    case .text(let text):
                        // A text with nothing to say (its fields are missing) is left out.
                        let rendered = text.render(context)
                        guard !rendered.isBlank else { continue }
                        item = ["text": .string(rendered)]
                    case .icon(let name): item = ["icon": .string(name)]
                    case .timer(let field, let countsDown):
                        guard let target = contentState[field] else { continue }  // not in this app version
                        item = ["timer": target, "countsDown": .bool(countsDown)]
                    }
                    if let id = element.element { item["link"] = .string(try link(surface: surface, element: id)) }
                    items.append(.object(item))
                }
                var richText: [String: JSONValue] = ["elements": .array(items)]
                if let accessibility { richText["accessibility"] = .string(accessibility.render(context)) }
                rendered.append(.object(["richText": .object(richText)]))
            case .progressBar(let position, let points, let accessibility):
                let text = position.render(context).trimmedOfWhitespace
                guard let value = Double(text) else {
                    throw ContentError(field: "layout.progressBar.position", problem: "renders to \"\(text.prefix(20))\", not a number")
                }
                var bar: [String: JSONValue] = ["position": .number(min(100, max(0, value))), "points": .array(points.map { .number($0) })]
                if let accessibility { bar["accessibility"] = .string(accessibility.render(context)) }
                rendered.append(.object(["progressBar": .object(bar)]))
            case .remoteImage(let url, let accessibility):
                let address = url.render(context)
                guard !address.isEmpty else { continue }  // no image for this event
                var image: [String: JSONValue] = ["url": .string(address)]
                if let rung = imageRung, !alreadyInlined.contains(address), let variants = images[address], rung < variants.count {
                    image["data"] = .string(variants[rung])
                }
                if let accessibility { image["accessibility"] = .string(accessibility.render(context)) }
                rendered.append(.object(["remoteImage": .object(image)]))
            }
        }
        return .array(rendered)
    }
}

extension String {
    /// Whether nothing but whitespace (`CharacterSet.whitespaces`: spaces and tabs) is left.
    var isBlank: Bool {
        // Any ASCII byte other than space or tab settles it; otherwise Foundation decides.
        if utf8.contains(where: { $0 < 0x80 && $0 != 0x20 && $0 != 0x09 }) { return false }
        return trimmingCharacters(in: .whitespaces).isEmpty
    }

    /// `trimmingCharacters(in: .whitespaces)`, without Foundation's cost when there is nothing to
    /// trim (an ASCII character other than space or tab at both ends).
    var trimmedOfWhitespace: String {
        if let first = utf8.first, let last = utf8.last, first < 0x80, last < 0x80, first != 0x20, first != 0x09, last != 0x20, last != 0x09 {
            return self
        }
        return trimmingCharacters(in: .whitespaces)
    }
}
