"""Word lists the synthetic generators draw from (kept apart so synth.py stays readable)."""

from __future__ import annotations


def _words(block: str) -> tuple[str, ...]:
    # A block of space-separated words is easier to read and edit than hundreds of literals.
    return tuple(block.split())


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

WORDS = _words(
    """
    able about account across action active address advice after again agent agree ahead
    almost amount animal answer apple area around arrive article autumn balance basket
    before behind better bottle branch bridge bright budget button camera candle capital
    carbon careful carpet center change charge circle client clock coffee common copper
    corner cotton county credit custom damage danger decide deliver design detail dinner
    direct doctor double dragon driver easily effort eleven energy engine escape evening
    export factor family farmer father figure finger flight flower follow forest format
    garden gather ginger golden ground growth guitar harbor health heavy hidden holiday
    honest hunter island jacket journey kettle kitchen ladder launch leader lemon letter
    level likely linen liquid little lumber market master meadow method middle minute
    mirror modern moment monkey motion narrow nature needle nickel number object office
    orange output oxygen packet palace parcel pepper pencil period planet pocket polite
    powder public purple quarter rabbit random record region remote repair report river
    rocket saddle safety salmon sample season second secret silver simple sister smooth
    spider spring square stable statue stream string summer supply switch symbol tablet
    talent temple thread ticket timber tomato travel tunnel twelve unit valley velvet
    vessel violet wallet window winter wonder wooden yellow zebra
    """
)

DOCUMENT_TITLES = (
    "INVOICE",
    "Shipping Notice",
    "Account Statement",
    "Delivery Receipt",
    "Purchase Order",
    "Service Report",
    "Membership Form",
    "Booking Confirmation",
    "Repair Estimate",
)
# Field name: the kind of value it holds.
DOCUMENT_FIELDS = {
    "Invoice No.": "id",
    "Order ID": "id",
    "Customer": "name",
    "Contact": "name",
    "Date": "date",
    "Due date": "date",
    "Phone": "phone",
    "City": "city",
    "Amount due": "money",
    "Balance": "money",
    "Reference": "code",
    "Account": "code",
}
FIRST_NAMES = (
    "Alice",
    "Bruno",
    "Chen",
    "Dana",
    "Elif",
    "Farid",
    "Grace",
    "Hugo",
    "Irene",
    "Jonas",
    "Keiko",
    "Lars",
    "Maria",
    "Nadia",
    "Omar",
    "Priya",
    "Rosa",
    "Tomas",
)
LAST_NAMES = (
    "Adams",
    "Becker",
    "Costa",
    "Dubois",
    "Evans",
    "Fischer",
    "Garcia",
    "Hansen",
    "Ito",
    "Jensen",
    "Kowalski",
    "Larsen",
    "Moreau",
    "Novak",
    "Okafor",
    "Petrov",
)
CITIES = (
    "Amsterdam",
    "Barcelona",
    "Chicago",
    "Dublin",
    "Edinburgh",
    "Florence",
    "Geneva",
    "Hamburg",
    "Istanbul",
    "Jakarta",
    "Kyoto",
    "Lisbon",
    "Madrid",
    "Nairobi",
    "Oslo",
)

STORES = (
    "GREEN LEAF MARKET",
    "CORNER BAKERY",
    "CITY PHARMACY",
    "BLUE RIVER CAFE",
    "HARBOR HARDWARE",
    "MAPLE GROCERY",
    "SUNRISE DELI",
    "NORTH STAR BOOKS",
)
GROCERIES = (
    "Coffee beans",
    "Milk 1L",
    "Bread",
    "Eggs 12",
    "Apples",
    "Green tea",
    "Rice 2kg",
    "Butter",
    "Cheddar",
    "Orange juice",
    "Pasta",
    "Tomatoes",
    "Chocolate",
    "Water 6pk",
    "Yogurt",
    "Bananas",
    "Honey",
    "Olive oil",
)

CHART_TITLES = (
    "Sales by region",
    "Visitors per month",
    "Units sold",
    "Survey results",
    "Energy use",
    "Orders by product",
    "Rainfall (mm)",
    "Team scores",
)
CHART_LABELS = (
    ("North", "South", "East", "West", "Central", "Coast", "Inland"),
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug"),
    ("Apples", "Pears", "Plums", "Grapes", "Kiwis", "Limes", "Figs"),
    ("Oslo", "Rome", "Paris", "Lima", "Tokyo", "Cairo", "Delhi"),
    ("Alpha", "Beta", "Gamma", "Delta", "Omega", "Sigma", "Kappa"),
)

CHINESE_WORDS = _words(
    """
    今天 明天 天气 北京 上海 广州 深圳 学习 工作 时间 电话 地址 价格 公司 学校 老师 学生 朋友
    医院 银行 超市 飞机 火车 汽车 地铁 图书馆 咖啡 茶叶 米饭 面条 水果 苹果 香蕉 西瓜 早上 下午
    晚上 周末 会议 报告 文件 经理 客户 订单 发票 合同 服务 质量 安全 出口 入口 注意 欢迎 光临
    谢谢 请勿 吸烟 停车 禁止 通行 开放 关闭 营业 中心 广场 大学 公园 博物馆 电影院 餐厅 厨房
    办公室 会议室 楼梯 电梯 北门 南门 东路 西路 人民 城市 国家 世界 历史 文化 科学 技术 数据
    网络 手机 电脑 软件 系统 问题 答案 方法 结果 计划 目标 春天 夏天 秋天 冬天 山水 花园 河流
    """
)
# Mixed Chinese/Latin/number lines; fields are filled by synth.chinese_line.
MIXED_TEMPLATES = (
    "订单号 {code}",
    "金额 {num} 元",
    "电话 {phone}",
    "日期 {date}",
    "{w} 第{n}号",
    "型号 {code} {w}",
    "{w} {num} 元",
    "房间 {n} 号 {w}",
)
