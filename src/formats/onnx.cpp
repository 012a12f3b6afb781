#include "src/formats/onnx.hpp"

#include <cstring>

namespace pt::onnx {

// ---- the wire format ------------------------------------------------------------------------
// A field is its key (field number << 3 | wire type) then its value: a varint (type 0), 4 bytes
// little-endian (type 5), or a varint length and that many bytes (type 2: strings, bytes and
// nested messages).

void Message::put_varint(uint64_t v) {
    while (v >= 0x80) data_ += char(uint8_t(v) | 0x80), v >>= 7;
    data_ += char(v);
}

Message& Message::varint(int field, uint64_t v) {
    key(field, 0);
    put_varint(v);
    return *this;
}

Message& Message::f32(int field, float v) {
    key(field, 5);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int b = 0; b < 4; b++) data_ += char(uint8_t(bits >> (8 * b)));
    return *this;
}

Message& Message::bytes(int field, std::string_view b) {
    key(field, 2);
    put_varint(b.size());
    data_.append(b);
    return *this;
}

Message& Message::bytes_at(int field, const void* p, size_t n) {
    key(field, 2);
    put_varint(n);
    holes_.push_back({data_.size(), {p, n}});
    held_ += n;
    return *this;
}

Message& Message::message(int field, const Message& m) {
    key(field, 2);
    put_varint(m.size());
    for (const Hole& h : m.holes_) holes_.push_back({data_.size() + h.at, h.bytes});
    held_ += m.held_;
    data_.append(m.data_);
    return *this;
}

std::vector<Chunk> Message::pieces() const {
    std::vector<Chunk> out;
    size_t from = 0;
    for (const Hole& h : holes_) {
        out.push_back({data_.data() + from, h.at - from});
        out.push_back(h.bytes);
        from = h.at;
    }
    out.push_back({data_.data() + from, data_.size() - from});
    return out;
}

// ---- onnx.proto's field numbers (onnx/onnx.proto, proto2) -----------------------------------
namespace field {
constexpr int kModelIrVersion = 1, kModelProducer = 2, kModelProducerVersion = 3, kModelGraph = 7, kModelOpset = 8;
constexpr int kOpsetDomain = 1, kOpsetVersion = 2;
constexpr int kGraphNode = 1, kGraphName = 2, kGraphInitializer = 5, kGraphInput = 11, kGraphOutput = 12;
constexpr int kNodeInput = 1, kNodeOutput = 2, kNodeName = 3, kNodeOpType = 4, kNodeAttribute = 5;
constexpr int kAttrName = 1, kAttrF = 2, kAttrI = 3, kAttrInts = 8, kAttrType = 20;
constexpr int kAttrTypeFloat = 1, kAttrTypeInt = 2, kAttrTypeInts = 7;
constexpr int kTensorDims = 1, kTensorDataType = 2, kTensorName = 8, kTensorRawData = 9, kTensorExternalData = 13,
              kTensorDataLocation = 14;
constexpr int kValueName = 1, kValueType = 2, kTypeTensor = 1, kTensorElemType = 1, kTensorShape = 2, kShapeDim = 1;
constexpr int kDimValue = 1, kDimParam = 2, kEntryKey = 1, kEntryValue = 2;
}  // namespace field

namespace {
Message value_info(const std::string& name, DataType type, const std::vector<int64_t>& dims,
                   const std::vector<std::string>& names) {
    Message shape;
    for (size_t i = 0; i < dims.size(); i++) {
        Message dim;
        if (dims[i] >= 0) dim.varint(field::kDimValue, uint64_t(dims[i]));
        else dim.bytes(field::kDimParam, names.at(i));
        shape.message(field::kShapeDim, dim);
    }
    Message tensor;
    tensor.varint(field::kTensorElemType, uint64_t(type)).message(field::kTensorShape, shape);
    Message t;
    t.message(field::kTypeTensor, tensor);
    Message v;
    v.bytes(field::kValueName, name).message(field::kValueType, t);
    return v;
}
}  // namespace

void Graph::input(const std::string& name, DataType type, const std::vector<int64_t>& dims, const std::vector<std::string>& names) {
    inputs_.push_back(value_info(name, type, dims, names));
}
void Graph::output(const std::string& name, DataType type, const std::vector<int64_t>& dims, const std::vector<std::string>& names) {
    outputs_.push_back(value_info(name, type, dims, names));
}

std::string Graph::weight(const std::string& name, const std::vector<int64_t>& dims, const float* data) {
    size_t n = 1;
    for (int64_t d : dims) n *= size_t(d);
    inits_.push_back({name, kFloat, dims, {}, data, n * 4});   // x86/ARM: little-endian
    return name;
}

std::string Graph::ints(const std::vector<int64_t>& values, bool scalar) {
    std::string name = "const_i" + std::to_string(counter_++);
    inits_.push_back({name, kInt64, scalar ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(values.size())},
                      std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8), nullptr, 0});
    return name;
}

std::string Graph::scalar(float v) {
    std::string name = "const_f" + std::to_string(counter_++);
    inits_.push_back({name, kFloat, {}, std::string(reinterpret_cast<const char*>(&v), 4), nullptr, 0});
    return name;
}

std::string Graph::node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<Attr>& attrs,
                        const std::string& out) {
    std::string name = op + "_" + std::to_string(counter_++), output = out.empty() ? name + "_out" : out;
    Message n;
    for (const std::string& in : inputs) n.bytes(field::kNodeInput, in);
    n.bytes(field::kNodeOutput, output).bytes(field::kNodeName, name).bytes(field::kNodeOpType, op);
    for (const Attr& a : attrs) {
        Message m;
        m.bytes(field::kAttrName, a.name);
        if (a.kind == Attr::Int) m.varint(field::kAttrI, uint64_t(a.i)).varint(field::kAttrType, field::kAttrTypeInt);
        if (a.kind == Attr::Float) m.f32(field::kAttrF, a.f).varint(field::kAttrType, field::kAttrTypeFloat);
        if (a.kind == Attr::Ints) {
            for (int64_t v : a.is) m.varint(field::kAttrInts, uint64_t(v));   // negative: 10-byte two's complement, as protobuf
            m.varint(field::kAttrType, field::kAttrTypeInts);
        }
        n.message(field::kNodeAttribute, m);
    }
    nodes_.push_back(n);
    return output;
}

Message Graph::model(const std::string& producer, size_t external_after, const std::string& external_file,
                     std::vector<Chunk>* external) const {
    size_t total = 0, offset = 0;   // offset: in the external file
    for (const Init& i : inits_) total += i.raw().second;
    const bool outside = total > external_after;
    Message g;
    for (const Message& n : nodes_) g.message(field::kGraphNode, n);
    g.bytes(field::kGraphName, "pipetrain");
    for (const Init& i : inits_) {
        Message t;
        for (int64_t d : i.dims) t.varint(field::kTensorDims, uint64_t(d));
        t.varint(field::kTensorDataType, uint64_t(i.type)).bytes(field::kTensorName, i.name);
        const Chunk raw = i.raw();
        if (outside && raw.second >= 1024) {   // small constants stay inline
            auto entry = [](const std::string& k, const std::string& v) {
                Message e;
                e.bytes(field::kEntryKey, k).bytes(field::kEntryValue, v);
                return e;
            };
            t.message(field::kTensorExternalData, entry("location", external_file))
                .message(field::kTensorExternalData, entry("offset", std::to_string(offset)))
                .message(field::kTensorExternalData, entry("length", std::to_string(raw.second)))
                .varint(field::kTensorDataLocation, 1);   // EXTERNAL
            external->push_back(raw);
            offset += raw.second;
        } else {
            t.bytes_at(field::kTensorRawData, raw.first, raw.second);
        }
        g.message(field::kGraphInitializer, t);
    }
    for (const Message& v : inputs_) g.message(field::kGraphInput, v);
    for (const Message& v : outputs_) g.message(field::kGraphOutput, v);
    Message opset;
    opset.bytes(field::kOpsetDomain, "").varint(field::kOpsetVersion, 17);
    Message m;
    m.varint(field::kModelIrVersion, 8).bytes(field::kModelProducer, producer).bytes(field::kModelProducerVersion, "1");
    m.message(field::kModelGraph, g).message(field::kModelOpset, opset);
    return m;
}

}  // namespace pt::onnx
